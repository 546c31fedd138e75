"""Puts comminsight_inject.pth at the top of the wheel (site-packages once installed), where
the interpreter reads .pth files; setuptools' declarative config has no place for one."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "comminsight_inject.pth"


class BuildWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(str(Path(__file__).parent / PTH), str(Path(self.build_lib) / PTH))


setup(cmdclass={"build_py": BuildWithPth})
