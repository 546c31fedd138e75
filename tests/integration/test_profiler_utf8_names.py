"""Names and ids that are not plain ASCII, through the real Profiler into its logs and back
through the offline reader: a name longer than its SHM field is cut between characters, never
inside one; bytes that are not UTF-8 (a job id or communicator name with 0xff) are written as
U+FFFD, so every log line stays valid UTF-8 JSON and `comminsight steps` reads every op.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_in_process import run_cli
from log_files import segment_data
from plugin_scenarios import BYTE_NAMES
from profiler_builds import run_scenario

from comminsight.log_segments import segment_name
from comminsight.semantic.offline import recover_steps

FIELD_BYTES = 127  # the SHM name field holds 128 bytes, NUL included


def cut_between_characters(name: str) -> bytes:
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= FIELD_BYTES:
        return raw
    text = raw[:FIELD_BYTES].decode("utf-8", "ignore")  # only the cut character goes
    return text.encode()


def log_lines(home: Path) -> list[tuple[Path, int, dict]]:
    """Every line of every segment, each of which must be UTF-8 JSON."""
    out = []
    for path, data in segment_data(home / "inspector_logs"):
        for number, raw in enumerate(data.splitlines(), 1):
            try:
                out.append((path, number, json.loads(raw.decode("utf-8"))))
            except ValueError as e:
                pytest.fail(f"{path.name}:{number} is not UTF-8 JSON ({e}): {raw[:300]!r}")
    return out


@pytest.mark.parametrize("build", ["plain", "asan"])
def test_long_multibyte_and_non_utf8_names_make_valid_lines(build, tmp_path):
    job_id = "job-\udcff\udcfe-7"  # the environment carries bytes 0xff 0xfe
    out = run_scenario("odd_bytes_names", build, tmp_path, COMMINSIGHT_JOB_ID=job_id)
    expected = [cut_between_characters(name) for name in BYTE_NAMES]
    assert [bytes.fromhex(h) for h in out["shm_names"]] == expected

    lines = [line for _, _, line in log_lines(tmp_path)]
    names = {
        int(line["ci"]["comm"]["comm_id"], 16): line["ci"]["comm"]["comm_name"]
        for line in lines
        if line.get("ci", {}).get("kind") == "comm_init"
    }
    # what the Agent's SHM reader makes of the same bytes
    assert names == {0xB0 + i: raw.decode("utf-8", "replace") for i, raw in enumerate(expected)}
    assert names[0xB3] == "grp\ufffd\ufffd:fsdp"
    starts = [line["ci"] for line in lines if line.get("ci", {}).get("kind") == "segment_start"]
    assert starts and {s["process"]["job_id"] for s in starts} == {"job-\ufffd\ufffd-7"}
    ops = [line["ci"] for line in lines if line.get("ci", {}).get("kind") == "c"]
    assert len(ops) == 3 * len(BYTE_NAMES)
    assert {ci["cn"] for ci in ops} == set(names.values())

    result = recover_steps(tmp_path / "inspector_logs", out_dir=tmp_path / "steps")
    assert result.problems == []
    assert result.ops == 3 * len(BYTE_NAMES)


# each form's op line: its marker, where its communicator name begins, and its communicator
# key (an op line without it is no op)
FORMS = {
    "compact": (b'"kind":"c",', b'"cn":"', b'"c":'),
    "inspector": (b'"kind":"coll"', b'"comm_name":"', b'"header"'),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_reader_names_each_bad_line_and_reads_on(tmp_path, form):
    """One segment with bad lines among good ones: a name cut inside a character (as older
    Profilers wrote it) is read with U+FFFD, an op line whose communicator key is garbled is
    left out; each is named by file and line, and every other op is read."""
    marker, name_key, comm_key = FORMS[form]
    good = tmp_path / "good"
    good.mkdir()
    run_scenario("odd_bytes_names", "plain", good, COMMINSIGHT_PROFILER_LOG_FORMAT=form)
    ((stored, data),) = segment_data(good / "inspector_logs")
    segment = stored.with_name(segment_name(stored))
    lines = data.splitlines(keepends=True)
    colls = [n for n, line in enumerate(lines, 1) if marker in line]
    cut, garbled = colls[0], colls[-1]
    name_at = lines[cut - 1].index(name_key) + len(name_key)
    lines[cut - 1] = lines[cut - 1][:name_at] + b"\xc3" + lines[cut - 1][name_at:]
    garbled_key = comm_key[:-2] + b"\xff" + comm_key[-2:]
    lines[garbled - 1] = lines[garbled - 1].replace(comm_key, garbled_key, 1)
    logs = tmp_path / "bad" / "inspector_logs"
    logs.mkdir(parents=True)
    bad = logs / segment.name
    bad.write_bytes(b"".join(lines))

    result = recover_steps(logs, out_dir=tmp_path / "steps")
    assert result.ops == len(colls) - 1
    named = {p.split(": ", 1)[0] for p in result.problems}
    assert {f"{bad}:{cut}", f"{bad}:{garbled}"} <= named, result.problems

    args = ("steps", str(logs), "--out", str(tmp_path / "cli"), "--format", "json")
    done = run_cli(args, {"COLUMNS": "500"})
    assert done.returncode == 0, done.stderr
    warned = " ".join(done.stderr.split())  # Rich wraps long lines
    assert f"{bad.name}:{cut}: not UTF-8" in warned and f"{bad.name}:{garbled}:" in warned
