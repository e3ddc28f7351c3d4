#!/usr/bin/env bash
# The rooms of the code (ARCHITECTURE, README "Where things are") as a test: which folders
# each library may include from, and the size of the CLI's command files (a command only
# translates flags into the study layer and prints what it returns); Python code lives in
# packages under tools/python/, not as loose scripts in tools/.
# Usage: structure_test.sh   (run from the repository root)
set -u
fails=0
passes=0

# room: the folders its #include "..." lines may name.
allowed() {
  case $1 in
    core) echo "core" ;;
    hw_models) echo "core hw_models" ;;
    traces) echo "core traces" ;;
    sim) echo "core hw_models sim" ;;
    sim/serve) echo "core hw_models traces sim sim/serve" ;;
    planner) echo "core hw_models planner" ;;
    tools/replay) echo "core hw_models tools/replay" ;;
    tools/study) echo "core hw_models traces sim sim/serve planner tools/replay tools/study" ;;
  esac
}
for room in core hw_models traces sim sim/serve planner tools/replay tools/study; do
  ok=$(allowed "$room")
  # sim/serve is a room of its own inside sim/.
  exclude=()
  [ "$room" = sim ] && exclude=(--exclude-dir=serve)
  bad=$(grep -rnE '^#include "' "$room" "${exclude[@]}" --include=*.cpp --include=*.h --include=*.cu |
    while IFS= read -r line; do
      inc=${line#*#include \"}
      inc=${inc%%\"*}
      top=${inc%%/*}
      [ "$top" = tools ] && { rest=${inc#tools/}; top=tools/${rest%%/*}; }
      case $inc in sim/serve/*) top=sim/serve ;; esac
      case " $ok " in *" $top "*) ;; *) echo "  $line" ;; esac
    done)
  if [ -z "$bad" ]; then
    passes=$((passes + 1))
  else
    echo "FAIL $room includes outside its room ($ok):"
    echo "$bad"
    fails=$((fails + 1))
  fi
done

for f in tools/cli/*_cmd.cpp; do
  n=$(wc -l <"$f")
  if [ "$n" -lt 150 ]; then
    passes=$((passes + 1))
  else
    echo "FAIL $f has $n lines: move what it computes or renders into the study layer"
    fails=$((fails + 1))
  fi
done

# Python tools are packages under tools/python/ (tierflow, tierflow_export, tierflow_torch),
# run as `python -m NAME`; a script directly in tools/ would be a second home for them.
loose=$(find tools -maxdepth 1 -name '*.py' | sort)
if [ -z "$loose" ]; then
  passes=$((passes + 1))
else
  echo "FAIL Python files directly in tools/ (make them a package under tools/python/):"
  echo "$loose" | sed 's/^/  /'
  fails=$((fails + 1))
fi
for dir in tools/python/*/; do
  if ! ls "$dir"*.py >/dev/null 2>&1 || [ -f "${dir}__init__.py" ]; then
    passes=$((passes + 1))
  else
    echo "FAIL ${dir%/} holds Python files but no __init__.py (not an importable package)"
    fails=$((fails + 1))
  fi
done

echo "$passes passed, $fails failed"
[ "$fails" = 0 ]
