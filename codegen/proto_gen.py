"""Protobuf protocols: grpcio-tools' protoc -> messages, gRPC stubs and .pyi type stubs.

The proto tree mirrors the Python package path (protocols/<id>/v<N>/comminsight_gen/...), so
the generated imports are right without post-editing.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from codegen.context import Context
from codegen.errors import SchemaError
from codegen.registry import Protocol


def generate(p: Protocol, ctx: Context) -> None:
    source = PurePosixPath(p.source)
    include_root = PurePosixPath(*source.parts[:3])  # protocols/<id>/v<N>
    if source.parts[3:4] != ("comminsight_gen",):
        raise SchemaError(
            p.source,
            "",
            "a .proto must live under "
            f"{include_root}/comminsight_gen/... (mirrors the Python package)",
        )
    text = (ctx.root / p.source).read_text()
    if 'syntax = "proto3";' not in text:
        raise SchemaError(p.source, "syntax", "must be proto3")
    out = ctx.stage / "generated/python"
    out.mkdir(parents=True, exist_ok=True)
    rel = str(source.relative_to(include_root))
    ctx.run_tool(
        p.source,
        [
            "grpc_tools.protoc",
            f"-I{include_root}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            rel,
        ],
    )
    stem = rel[: -len(".proto")]
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
        ctx.written.append(f"generated/python/{stem}{suffix}")
