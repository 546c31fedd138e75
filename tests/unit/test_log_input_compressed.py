"""The offline Semantic Engine reads compressed segments (`.jsonl.zst`) as the segments they
hold: the same ops, positions, identities and Steps as the uncompressed files, each segment
once while both forms exist, a corrupt one named without losing the others, and a checkpoint
taken before a segment was sealed or compressed resumed after it."""

from __future__ import annotations

import json
import shutil
import tarfile
import zlib
from pathlib import Path

import msgspec
import pytest
from log_files import compress

from comminsight.log_segments import read_segment, verify_segment
from comminsight.semantic import log_input
from comminsight.semantic.log_input import read_gpu_logs
from comminsight.semantic.offline import CHECKPOINT_NAME, recover_steps
from comminsight.semantic.process_gpus import split_process

# PyTorch FSDP2 on 2xH200 through the real plugin: two processes, one segment each
DATA = Path(__file__).parents[1] / "data" / "gpu" / "fsdp_h200x2.tar.gz"
SEGMENTS = 6  # each process's log is cut into this many segments
COMPACT = {"separators": (",", ":")}  # as the Profiler writes


def _line(obj: dict) -> bytes:
    return json.dumps(obj, **COMPACT).encode() + b"\n"


def _resegment(source: Path, dest: Path, parts: int) -> list[Path]:
    """The log of one process cut into `parts` sealed segments, as the Profiler seals them:
    each opens with the process's segment_start and ends with a seal over its bytes."""
    lines = source.read_bytes().splitlines(keepends=True)
    start, body = json.loads(lines[0])["ci"], lines[1:-1]
    seal = json.loads(lines[-1])["ci"]
    stream = source.name.removesuffix("-000000.jsonl")
    size = -(-len(body) // parts)
    paths = []
    for index in range(parts):
        chunk = body[index * size : (index + 1) * size]
        cis = [json.loads(line)["ci"] for line in chunk]
        rings = [ci["ring_seq"] for ci in cis if "ring_seq" in ci]
        head = {**start, "segment_index": index, "next_ring_seq": rings[0]}
        data = _line({"ci": head}) + b"".join(chunk)
        tail = {
            **seal,
            "segment_index": index,
            "record_count": 1 + len(chunk),
            "byte_count": len(data),
            "crc32": zlib.crc32(data),
            "op_count": sum(ci["kind"] in ("coll", "p2p") for ci in cis),
            "ring_record_count": len(rings),
            "first_ring_seq": rings[0],
            "last_ring_seq": rings[-1],
            "reason": "size" if index < parts - 1 else seal["reason"],
        }
        path = dest / f"{stream}-{index:06d}.jsonl"
        path.write_bytes(data + _line({"ci": tail}))
        verify_segment(path)  # a real sealed segment
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    """Two processes' logs in SEGMENTS sealed, uncompressed segments each."""
    root = tmp_path_factory.mktemp("ddp")
    with tarfile.open(DATA) as tar:
        tar.extractall(root, filter="data")
    logs = root / "logs"
    logs.mkdir()
    for source in sorted((root / "inspector_logs").glob("*.jsonl")):
        _resegment(source, logs, SEGMENTS)
    return logs


@pytest.fixture
def logs(plain, tmp_path) -> Path:
    dest = tmp_path / "inspector_logs"
    shutil.copytree(plain, dest)
    return dest


def ops_of(directory: Path) -> tuple[dict[str, list], list[str]]:
    """Every GPU's ops, and what listing and reading them found."""
    logs, problems = read_gpu_logs(directory)
    ops = {log.stream: list(log.ops()) for log in logs}
    return ops, problems + [p for log in logs for p in log.problems]


def identities_of(directory: Path) -> dict:
    logs, _ = read_gpu_logs(directory)
    return {log.stream: log.identity for log in logs}


def steps_of(result) -> list:
    return [
        (g.stream, g.gpu, g.ops, g.method, msgspec.json.encode(g.summaries)) for g in result.gpus
    ]


@pytest.fixture(scope="module")
def reference(plain):
    """What the uncompressed logs give: ops by stream, identities, Steps."""
    ops, problems = ops_of(plain)
    assert problems == [] and len(ops) == 2
    assert all(len(o) > 200 for o in ops.values())
    result = recover_steps(plain)
    assert result.problems == [] and all(g.summaries for g in result.gpus)
    return ops, identities_of(plain), steps_of(result)


@pytest.mark.parametrize("which", ["all", "first", "middle", "last"])
def test_compressed_segments_give_the_same_ops_positions_and_steps(logs, reference, which):
    segments = sorted(logs.glob("*.jsonl"))
    chosen = {
        "all": segments,
        "first": [p for p in segments if p.name.endswith("-000000.jsonl")],
        "middle": [p for p in segments if p.name.endswith(("-000001.jsonl", "-000002.jsonl"))],
        "last": [p for p in segments if p.name.endswith(f"-{SEGMENTS - 1:06d}.jsonl")],
    }[which]
    for path in chosen:
        compress(path)
    assert sorted(logs.glob("*.jsonl.zst")) and len(list(logs.iterdir())) == len(segments)
    ops, problems = ops_of(logs)
    assert problems == []
    # positions name the segment (`.jsonl`) whichever file held it
    assert ops == reference[0]
    assert identities_of(logs) == reference[1]  # the first segment's segment_start: its GPU
    result = recover_steps(logs)
    assert result.problems == []
    assert steps_of(result) == reference[2]


def test_a_segment_held_both_ways_is_read_once(logs, reference):
    segments = sorted(logs.glob("*.jsonl"))
    for path in segments:
        compress(path, keep=True)  # the moment between the rename and the unlink
    # a compression under way is no segment of any kind
    (logs / (segments[1].name + ".zst.partial")).write_bytes(b"\x28\xb5\x2f\xfdhalf")
    ops, problems = ops_of(logs)
    assert problems == []
    assert ops == reference[0]
    result = recover_steps(logs)
    assert result.problems == [] and steps_of(result) == reference[2]


def test_the_uncompressed_file_is_read_while_both_are_there(logs, reference):
    """Both forms hold the same bytes: the `.jsonl` is the one read (a mapping, no
    decompression), so a compressed copy that differs never shows."""
    path = sorted(logs.glob("*-000001.jsonl"))[0]
    path.with_name(path.name + ".zst").write_bytes(b"not what the segment holds")
    ops, problems = ops_of(logs)
    assert problems == [] and ops == reference[0]


def test_a_sealed_segment_over_a_leftover_open_one_compressed_or_not(logs, reference):
    path = sorted(logs.glob("*-000002.jsonl"))[0]
    lines = path.read_bytes().splitlines(keepends=True)
    path.with_name(path.name + ".partial").write_bytes(b"".join(lines[: len(lines) // 2]))
    compress(path)
    ops, problems = ops_of(logs)
    assert problems == [] and ops == reference[0]


@pytest.mark.parametrize("how", ["truncated", "garbage", "empty"])
def test_a_corrupt_compressed_segment_is_named_and_the_others_read(logs, reference, how):
    path = sorted(logs.glob("*-000001.jsonl"))[0]
    stream = path.name.removesuffix("-000001.jsonl")
    packed = compress(path)
    data = packed.read_bytes()
    packed.write_bytes(
        {"truncated": data[: len(data) // 2], "garbage": b"\x00garbage" * 64, "empty": b""}[how]
    )
    ops, problems = ops_of(logs)
    named = [p for p in problems if str(packed) in p]
    assert named and len(named) == len(problems), problems
    bad = path.name
    expected = {s: [op for op in o if op.position.segment != bad] for s, o in reference[0].items()}
    assert len(expected[stream]) < len(reference[0][stream])
    assert ops == expected  # every other segment of the process, and the other process
    result = recover_steps(logs)
    assert any(str(packed) in p for p in result.problems)
    assert len(result.gpus) == 2 and sum(g.ops for g in result.gpus) == sum(
        len(o) for o in expected.values()
    )


def test_a_segment_compressed_after_it_was_listed_is_read_from_its_zst(logs, reference):
    listed, problems = read_gpu_logs(logs)
    assert problems == []
    for path in sorted(logs.glob("*.jsonl")):
        compress(path)  # between the listing and the reading
    ops = {log.stream: list(log.ops()) for log in listed}
    assert all(log.problems == [] for log in listed)
    assert ops == reference[0]


def test_an_open_segment_sealed_and_compressed_after_it_was_listed(logs, reference):
    """Listed open (`.partial`, read ahead whole at that moment to tell the GPUs apart), read
    again from inside it after it was sealed and compressed: from its `.jsonl.zst`."""
    path = sorted(logs.glob(f"*-{SEGMENTS - 1:06d}.jsonl"))[0]
    stream = path.name.removesuffix(f"-{SEGMENTS - 1:06d}.jsonl")
    sealed = path.read_bytes()
    open_ = path.with_name(path.name + ".partial")
    open_.write_bytes(sealed[: sealed.rstrip(b"\n").rfind(b"\n") + 1])  # no seal yet
    path.unlink()
    listed, problems = read_gpu_logs(logs)
    assert problems == []
    (log,) = [g for g in listed if g.stream == stream]
    assert log.segments[-1] == open_
    path.write_bytes(sealed)
    open_.unlink()
    compress(path)
    ops = reference[0][stream]
    k = next(i for i, op in enumerate(ops) if op.position.segment == path.name) + 5
    again = list(log.ops(ops[k].position.resume_here()))
    assert log.problems == []
    assert again == ops[k:]


def _member(rank: int, device: int) -> dict:
    return {
        "comm_id": "00000000000000aa",
        "comm_rank": rank,
        "nranks": 2,
        "nnodes": 1,
        "name_source": "none",
        "pid": 7,
        "host": "h",
        "cuda_device": device,
    }


def test_a_compressed_segment_tells_a_process_s_gpus_apart(tmp_path):
    start = {
        "kind": "segment_start",
        "schema_version": 1,
        "segment_index": 0,
        "process": {"host": "h", "pid": 7, "start_real_ns": 1},
        "clock": {"mono_ns": 1, "real_ns": 1},
        "communicators": [_member(0, 0), _member(1, 1)],
        "next_ring_seq": 1,
    }
    path = tmp_path / "ci-h-7-1-000000.jsonl"
    path.write_bytes(_line({"ci": start}))
    split = split_process([compress(path)])
    assert split.problems == [] and split.split
    assert [g.suffix for g in split.gpus] == [".dev0", ".dev1"]
    assert split.process.host == "h" and split.process.pid == 7


class Interrupted(Exception):
    pass


def _interrupted_run(logs: Path, out: Path, every: int, stop_after: int) -> dict:
    seen = 0

    def stop(_ops):
        nonlocal seen
        seen += 1
        if seen == stop_after:
            raise Interrupted()

    with pytest.raises(Interrupted):
        recover_steps(logs, out_dir=out, checkpoint_every_ops=every, on_ops=stop)
    return json.loads((out / CHECKPOINT_NAME).read_text())


EVERY = 50  # ops between checkpoints: several per segment


@pytest.mark.parametrize("was", ["sealed", "open"])
def test_a_checkpoint_taken_before_compression_resumes_after_it(plain, logs, tmp_path, was):
    """Stopped inside a segment while it was `.jsonl` (or still `.jsonl.partial`), resumed
    once every segment is `.jsonl.zst`: the same bytes as a run never interrupted."""
    reference = tmp_path / "reference"
    result = recover_steps(logs, out_dir=reference, checkpoint_every_ops=EVERY)
    assert result.problems == []
    expected = {p.name: p.read_bytes() for p in reference.glob("*.jsonl")}
    assert len(expected) == 2 and all(expected.values())

    # the first GPU stops after its fourth segment (one batch per segment), its checkpoint
    # (the start of the Step still open) in the third
    stop_after, holding = 4, "-000002.jsonl"
    if was == "open":  # the third segments not sealed yet
        for path in logs.glob(f"*{holding}"):
            lines = path.read_bytes().splitlines(keepends=True)
            path.with_name(path.name + ".partial").write_bytes(b"".join(lines[:-1]))
            path.unlink()
    out = tmp_path / "stopped"
    checkpoint = _interrupted_run(logs, out, EVERY, stop_after)
    (state,) = checkpoint["gpus"]
    position = state["input"]
    suffix = holding + (".partial" if was == "open" else "")
    assert position["segment"].endswith(suffix) and position["byte_offset"] > 0, position

    for path in logs.glob("*.partial"):  # sealed since
        path.unlink()
        shutil.copyfile(plain / path.name.removesuffix(".partial"), logs / path.stem)
    for path in sorted(logs.glob("*.jsonl")):
        compress(path)
    assert not list(logs.glob("*.jsonl")) and not list(logs.glob("*.partial"))

    again = recover_steps(logs, out_dir=out, checkpoint_every_ops=EVERY)
    assert again.problems == [] and again.resumed == 1
    assert {p.name: p.read_bytes() for p in out.glob("*.jsonl")} == expected


def test_what_is_read_ahead_is_bounded_over_the_whole_listing(logs, reference, monkeypatch):
    """Every process is split before any is read: what their readers keep of compressed
    segments read ahead is one bound for all of them, and past it a segment is read in its
    turn, with the same ops."""
    for path in sorted(logs.glob("*.jsonl")):
        compress(path)
    one_segment = max(
        sum(1 for line in read_segment(p).splitlines() if b'"kind":"coll"' in line)
        for p in logs.glob("*.jsonl.zst")
    )
    monkeypatch.setattr(log_input, "AHEAD_OPS", 1)
    listed, _ = read_gpu_logs(logs)
    kept = {id(log.reader._ahead_budget): log.reader._ahead_budget.ops for log in listed}
    assert len(kept) == 1  # one budget for the listing
    assert next(iter(kept.values())) <= 1 + one_segment  # the first read ahead passes it
    ops, problems = ops_of(logs)
    assert problems == [] and ops == reference[0]
