"""codegen's datamodel-codegen worker: one interpreter for a generation's runs, whose output is
the tool's own, whose failures say what failed, and which never hangs a generation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from codegen.jsonschema_models import DATAMODEL_FLAGS
from codegen.tool_worker import TOOL, ToolWorker

ROOT = Path(__file__).resolve().parents[2]
# the two smallest protocols' schemas: what is checked does not grow with the schema
SCHEMAS = [
    "protocols/python-stack/v1/python-stack.schema.json",
    "protocols/inject-metadata/v1/inject-metadata.schema.json",
]


def _args(source: str, out: Path) -> list[str]:
    return ["--input", source, "--input-file-type", "jsonschema", "--output", str(out)]


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
        status, output = worker.run(_args("protocols/no-such-schema.json", tmp_path / "x.py"))
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
