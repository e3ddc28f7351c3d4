# Sourced by scripts/test.sh and scripts/fuzz.sh: configure_tree DIR MODE configures the
# build tree DIR (CMake, Ninja) for one of two modes, the same way for every caller, so that
# the sanitizer test run and the fuzzers share one build.
#   test      the compiler CMake finds (Debian's g++), RelWithDebInfo at -O2 with line tables
#             (-g1: failures still name file and line; the suite compiles about 40% faster
#             than with full debug info)
#   sanitize  Debian's clang with AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer's
#             instrumentation (TIERFLOW_FUZZ): the test suite and the fuzz targets of
#             tests/fuzz. Debug keeps the assertions; the engines compile at -O1, the level
#             AddressSanitizer is meant to run at (unoptimized, the e2e sweep test alone
#             took 547 s of CI), the rest at -O0 (tierflow_engine_options, CMakeLists.txt).
# Both are unity builds (the project's default, CMakeLists.txt) whose test code compiles at
# -O0 but for two files (TIERFLOW_QUICK_TESTS, tests/CMakeLists.txt): they are built once
# and run once. TIERFLOW_WERROR=1 makes warnings errors (CI does).
configure_tree() {
  local dir=$1 mode=$2 werror=OFF
  [ "${TIERFLOW_WERROR:-0}" = 1 ] && werror=ON
  case $mode in
    test)
      cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DTIERFLOW_QUICK_TESTS=ON \
        -DTIERFLOW_WERROR=$werror >/dev/null
      ;;
    sanitize)
      # shellcheck source=scripts/apt.sh
      source scripts/apt.sh
      apt_install_missing sanitize clang libclang-rt-14-dev
      # The compiler is chosen when the tree is first configured (naming it again would make
      # CMake start over); a tree made by another compiler (an older g++ build/asan) starts
      # over here.
      local compiler=()
      if ! grep -qs '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang' "$dir/CMakeCache.txt"; then
        rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
        compiler=(-DCMAKE_CXX_COMPILER=clang++)
      fi
      cmake -S . -B "$dir" -G Ninja "${compiler[@]}" -DCMAKE_BUILD_TYPE=Debug \
        -DCMAKE_CXX_FLAGS_DEBUG="-g1" -DTIERFLOW_FUZZ=ON -DTIERFLOW_QUICK_TESTS=ON \
        -DTIERFLOW_WERROR=$werror >/dev/null
      ;;
    *)
      echo "configure_tree: unknown mode '$mode' (test, sanitize)" >&2
      return 2
      ;;
  esac
}
