"""pytest fixtures of the contract tests."""

from __future__ import annotations

import os
import shutil

import pytest

from contract_helpers import Compiler


@pytest.fixture(scope="session")
def compiler(tmp_path_factory) -> Compiler:
    if shutil.which(os.environ.get("CC", "gcc")) is None:
        pytest.fail("a C compiler (gcc, or $CC) is required for contract tests")
    return Compiler(tmp_path_factory.mktemp("contract-c"))
