"""codegen's datamodel-codegen worker: one interpreter for a generation's runs, whose output is
the tool's own, whose failures say what failed, and which never hangs a generation."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.jsonschema_models import DATAMODEL_FLAGS, closed_models
from codegen.tool_worker import TOOL, ToolWorker

ROOT = Path(__file__).resolve().parents[2]
# the two smallest protocols' schemas: what is checked does not grow with the schema
SCHEMAS = [
    "protocols/python-stack/v1/python-stack.schema.json",
    "protocols/inject-metadata/v1/inject-metadata.schema.json",
]


def _args(source: str, out: Path) -> list[str]:
    """What generate_models passes, but the flags: its extra template data too."""
    extra = out.with_suffix(".extra.json")
    extra.write_text(json.dumps(closed_models(json.loads((ROOT / source).read_text()))))
    return [
        *("--input", source, "--input-file-type", "jsonschema", "--output", str(out)),
        *("--extra-template-data", str(extra)),
    ]


def test_runs_in_one_worker_write_what_the_tool_alone_writes(tmp_path):
    with ToolWorker(ROOT) as worker:
        for index, source in enumerate(SCHEMAS):
            status, output = worker.run(
                [*_args(source, tmp_path / f"w{index}.py"), *DATAMODEL_FLAGS]
            )
            assert status == 0, output
    alone = tmp_path / "alone.py"
    done = subprocess.run(
        [sys.executable, "-m", TOOL, *_args(SCHEMAS[-1], alone), *DATAMODEL_FLAGS],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    # the second run of the worker, after another schema, is the tool's output byte for byte
    assert (tmp_path / "w1.py").read_bytes() == alone.read_bytes()


def test_a_failed_run_returns_its_status_and_words_and_the_worker_goes_on(tmp_path):
    with ToolWorker(ROOT) as worker:
        status, output = worker.run(["--input", "protocols/no-such-schema.json"])
        assert status != 0
        assert "no-such-schema.json" in output
        status, output = worker.run(["--no-such-option"])
        assert status != 0 and "--no-such-option" in output
        status, output = worker.run([*_args(SCHEMAS[0], tmp_path / "ok.py"), *DATAMODEL_FLAGS])
        assert status == 0, output
        assert "class " in (tmp_path / "ok.py").read_text()


def test_a_dead_worker_is_an_error_not_a_hang(tmp_path):
    worker = ToolWorker(ROOT)
    worker._proc.kill()
    worker._proc.wait()
    status, output = worker.run(_args(SCHEMAS[0], tmp_path / "x.py"))
    assert status != 0
    assert f"the {TOOL} worker exited" in output
    worker.close()


@pytest.mark.timeout(120)  # the failure this guards against is a generation that never ends
def test_a_run_that_reads_standard_input_meets_its_end_not_the_next_request(tmp_path):
    """Without --input the tool reads its standard input: an empty one, not the worker's
    pipe of requests (which it would wait on for ever, the generation holding the lock)."""
    with ToolWorker(ROOT) as worker:
        status, output = worker.run(["--output", str(tmp_path / "x.py"), *DATAMODEL_FLAGS])
        assert status != 0, output
        status, output = worker.run([*_args(SCHEMAS[0], tmp_path / "ok.py"), *DATAMODEL_FLAGS])
        assert status == 0, output


def test_a_tree_without_codegen_generates_from_its_own_root(tmp_path):
    """`codegen --root` names another tree: the worker runs from there, with sources relative
    to it, whether or not that tree holds codegen."""
    tree = tmp_path / "tree"
    (tree / SCHEMAS[0]).parent.mkdir(parents=True)
    shutil.copy(ROOT / SCHEMAS[0], tree / SCHEMAS[0])
    with ToolWorker(tree) as worker:
        status, output = worker.run([*_args(SCHEMAS[0], tmp_path / "x.py"), *DATAMODEL_FLAGS])
    assert status == 0, output
    assert "class " in (tmp_path / "x.py").read_text()
