"""The CommInsight wheel carries comminsight/semantic/native/libciengine.so, a native library
the Semantic Engine opens with cffi's ABI mode (dlopen): no Python C API, so any Python 3
runs it, but only on the platform it was compiled for. The wheel is tagged so
(py3-none-<platform>, its files in platlib) instead of none-any, which pip would install
anywhere. Everything else is in pyproject.toml.

`make build-engine` compiles the library to build/engine/ (build outputs stay out of the
source tree); building the wheel copies it from there to where the installed package looks
for it, beside comminsight/semantic/native/__init__.py."""

import os
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools.errors import SetupError

# the Makefile names the library it built (BUILD may be elsewhere: `make BUILD=/tmp/b`)
ENGINE = Path(
    os.environ.get("COMMINSIGHT_ENGINE_SO")
    or Path(__file__).resolve().parent / "build" / "engine" / "libciengine.so"
)
ENGINE_IN_PACKAGE = Path("comminsight", "semantic", "native", "libciengine.so")


class NativeLibraryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a native file inside: build for platlib, not purelib


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        _python, _abi, platform = super().get_tag()
        return "py3", "none", platform  # not the interpreter's: the library has no Python ABI


class BuildPyWithEngine(build_py):
    """The package as built, with the engine library the Makefile built under build/."""

    def run(self):
        super().run()
        if self.editable_mode:
            return  # an editable install runs from the checkout, which finds build/engine/
        if not ENGINE.is_file():
            raise SetupError(f"{ENGINE} is missing: `make build-engine` builds it")
        self.copy_file(str(ENGINE), str(Path(self.build_lib) / ENGINE_IN_PACKAGE))

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs
        return [*outputs, str(Path(self.build_lib) / ENGINE_IN_PACKAGE)]


# `make` builds each wheel in a directory of its own (COMMINSIGHT_BUILD_BASE): two builds at
# once never share setuptools' intermediate tree (build/lib, the .egg-info)
BUILD_BASE = os.environ.get("COMMINSIGHT_BUILD_BASE")

setup(
    distclass=NativeLibraryDistribution,
    cmdclass={"bdist_wheel": PlatformWheel, "build_py": BuildPyWithEngine},
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}}
    if BUILD_BASE
    else {},
)
