"""Builds the `tierflow` Python package with the project's CMake (pyproject.toml,
docs/python.md): a build tree under setuptools' build_temp with the C++ tests and CUDA off,
the extension target `tierflow_python` built there and copied into the package, and the
shipped topologies and models copied beside the package's code (tierflow/configs), where
the package finds them once installed.

CMAKE_BUILD_PARALLEL_LEVEL=N limits the build to N jobs.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    """The CMake project's version: one number for the library, the CLI and the package."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        return re.search(r"project\(tierflow VERSION ([0-9.]+)", f.read()).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                        "-DTIERFLOW_BUILD_TESTS=OFF", "-DTIERFLOW_CUDA=OFF", "-DTIERFLOW_PYTHON=ON",
                        f"-DTIERFLOW_PYTHON_EXECUTABLE={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "tierflow_python"], check=True)
        (built,) = glob.glob(os.path.join(build, "python", "tierflow", "_tierflow*.so"))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


class BuildPackage(build_py):
    def run(self):
        super().run()
        for folder in ("hw", "models"):
            target = os.path.join(self.build_lib, "tierflow", "configs", folder)
            shutil.rmtree(target, ignore_errors=True)
            os.makedirs(target)
            for path in sorted(glob.glob(os.path.join(ROOT, "configs", folder, "*.yaml"))):
                shutil.copyfile(path, os.path.join(target, os.path.basename(path)))


setup(
    version=version(),
    packages=["tierflow"],
    package_dir={"tierflow": "tools/python/tierflow"},
    ext_modules=[Extension("tierflow._tierflow", sources=[])],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPackage},
    zip_safe=False,
)
