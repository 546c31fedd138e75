"""codegen run inside the test process, for modules that run it on many small cases.

`python -m codegen ...` in a process of its own spends most of a small case starting the
interpreter and importing codegen; `codegen(...)` calls the same main() and hands back what the
process would have: its exit status, stdout and stderr (a module keeps one real process run to
show that the command maps an error to its exit status).

codegen parses every protocol source with PyYAML's pure-Python loader, a second or more per
tree, and such a module parses the same unchanged sources dozens of times:
`remembered_safe_load()` gives a text seen before a deep copy of what the loader returned for
it the first time - the same values, the same shared (anchored) nodes, a fresh object the
caller may change - so the code under test sees exactly what safe_load would have given it. A
new text, a stream and anything the loader refuses go to the real loader every time.
"""

from __future__ import annotations

import contextlib
import copy
import io
import subprocess
from collections.abc import Iterator

import pytest
import yaml

from codegen.__main__ import main as codegen_main


def codegen(*argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m codegen ARGV`, in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = codegen_main(list(argv))
    return subprocess.CompletedProcess(["codegen", *argv], rc, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def remembered_safe_load() -> Iterator[None]:
    """Patch yaml.safe_load for the duration (a module-scoped fixture's), restored after."""
    real = yaml.safe_load
    seen: dict[str, object] = {}

    def safe_load(stream):
        if not isinstance(stream, str):
            return real(stream)
        if stream not in seen:
            seen[stream] = real(stream)  # raises for a text it refuses: nothing remembered
        return copy.deepcopy(seen[stream])

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(yaml, "safe_load", safe_load)
        yield
