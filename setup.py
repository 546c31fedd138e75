"""The CommInsight wheel carries comminsight/semantic/native/libciengine.so, a native library
the Semantic Engine opens with cffi's ABI mode (dlopen): no Python C API, so any Python 3
runs it, but only on the platform it was compiled for. The wheel is tagged so
(py3-none-<platform>, its files in platlib) instead of none-any, which pip would install
anywhere. Everything else is in pyproject.toml."""

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel


class NativeLibraryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a native file inside: build for platlib, not purelib


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        _python, _abi, platform = super().get_tag()
        return "py3", "none", platform  # not the interpreter's: the library has no Python ABI


setup(distclass=NativeLibraryDistribution, cmdclass={"bdist_wheel": PlatformWheel})
