"""Every struct, field and constant of every C-ABI protocol agrees across C, cffi and numpy.

The C side is the compiler itself (generated/c/contract/<stem>_layout.c prints sizeof/offsetof
of the generated header); the Python side is the generated module's cffi cdef and numpy
dtypes, and the layout codegen computed from the schema.
"""

from __future__ import annotations

import enum
import importlib
import json
import subprocess

import pytest

from contract_helpers import INCLUDE, ROOT, protocols_of_kind, stem

C_ABI = protocols_of_kind("c-abi")
IDS = [stem(p) for p in C_ABI]


@pytest.fixture(scope="module", params=C_ABI, ids=IDS)
def layout(request, compiler):
    p = request.param
    exe = compiler.build(f"{stem(p)}_layout", [ROOT / f"generated/c/contract/{stem(p)}_layout.c"])
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    records = [json.loads(line) for line in lines.splitlines()]
    module = importlib.import_module(f"comminsight_gen.abi.{stem(p)}")
    return p, records, module


def test_every_struct_size_and_alignment_matches(layout):
    _, records, m = layout
    sizes = {
        r["type"]: (r["size"], r["align"]) for r in records if "field" not in r and "type" in r
    }
    assert set(sizes) == set(m.SIZEOF), "C and Python know different types"
    ffi = m.ffi()
    for ctype, (size, align) in sizes.items():
        assert m.SIZEOF[ctype] == size, f"schema layout of {ctype}"
        assert m.ALIGNOF[ctype] == align, f"schema alignment of {ctype}"
        assert ffi.sizeof(ctype) == size, f"cffi sizeof {ctype}"
        assert ffi.alignof(ctype) == align, f"cffi alignof {ctype}"
        assert m.DTYPES[ctype].itemsize == size, f"numpy itemsize {ctype}"


def test_every_field_offset_and_size_matches(layout):
    _, records, m = layout
    ffi = m.ffi()
    fields = [r for r in records if "field" in r]
    assert sum(len(f) for f in m.OFFSETOF.values()) == len(fields)
    for r in fields:
        ctype, name = r["type"], r["field"]
        assert m.OFFSETOF[ctype][name] == r["offset"], f"schema offset {ctype}.{name}"
        assert ffi.offsetof(ctype, name) == r["offset"], f"cffi offset {ctype}.{name}"
        dtype, offset = m.DTYPES[ctype].fields[name][:2]
        assert offset == r["offset"], f"numpy offset {ctype}.{name}"
        assert dtype.itemsize == r["size"], f"numpy size {ctype}.{name}"
        cfield = dict(ffi.typeof(ctype).fields)[name]
        assert ffi.sizeof(cfield.type) == r["size"], f"cffi size {ctype}.{name}"


def test_every_macro_value_matches(layout):
    _, records, m = layout
    macros = {r["macro"]: r["value"] for r in records if "macro" in r}
    assert macros == m.MACROS
    ffi = m.ffi()
    lib = ffi.dlopen(None)
    for name, value in macros.items():
        assert getattr(lib, name) == value, f"cffi #define {name}"


def test_python_enums_match_c_macros(layout):
    _, _, m = layout
    classes = [
        v
        for v in vars(m).values()
        if isinstance(v, type)
        and issubclass(v, (enum.IntEnum, enum.IntFlag))
        and v.__module__ == m.__name__
    ]
    assert classes, "every C-ABI protocol here defines enums"
    for cls in classes:
        for member in cls.__members__.values():
            assert any(
                name.endswith(f"_{member.name}") and value == member.value
                for name, value in m.MACROS.items()
            ), f"{cls.__name__}.{member.name} has no C macro with value {member.value}"


HEADERS = sorted((INCLUDE / "comminsight").glob("*.h"))


@pytest.mark.parametrize("header", HEADERS, ids=[h.name for h in HEADERS])
@pytest.mark.parametrize("std", ["c11", "c++17"])
def test_every_generated_header_compiles_alone(header, std, tmp_path):
    """Each header stands alone (its own includes) and is clean under -Werror, in C and C++;
    a codec header with the appenders and readers it asks its includer for (here, doing
    nothing), so that its encoders and decoders are compiled too."""
    c = std.startswith("c1")
    prelude = ""
    if header.name.endswith("_codec.h"):
        prelude = "".join(
            f"#define CI_JSON_{name}({args}) ((void)(x))\n"
            for name, args in [
                ("LIT", "x"),
                ("U64", "x"),
                ("I64", "x"),
                ("HEX", "x, p, n"),
                ("F6", "x"),
                ("STR", "x"),
            ]
        )
        # and the readers the decoders read through (reading nothing)
        prelude += "".join(
            f"#define CI_{name}(x) ((void)(x), (void)e{', 0' if name == 'TRY' else ''})\n"
            for name in ("TAKE", "TRY", "TAKE_UINT", "TAKE_INT", "TAKE_NUM", "TAKE_TEXT")
        )
        prelude += "#define CI_SKIP_UINT() ((void)e)\n#define CI_SKIP_INT() ((void)e)\n"
        prelude += "#define CI_SKIP_OBJECT() ((void)e)\n"
    proc = subprocess.run(
        [
            "gcc" if c else "g++",
            "-x",
            "c" if c else "c++",
            f"-std={std}",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            f"-I{INCLUDE}",
            "-c",
            "-",
            "-o",
            str(tmp_path / "x.o"),
        ],
        input=f'{prelude}#include "comminsight/{header.name}"\ntypedef int header_check;\n',
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_every_c_abi_protocol_has_a_header():
    assert {f"{stem(p)}.h" for p in C_ABI} <= {h.name for h in HEADERS}


def test_fifo_event_fits_an_atomic_pipe_write():
    from comminsight_gen.abi import fifo_event_v1 as f

    assert f.SIZEOF["ci_fifo_event_v1_t"] == f.EVENT_SIZE <= f.PIPE_BUF_LINUX


def test_shm_records_are_cache_line_multiples():
    from comminsight_gen.abi import shm_v1 as s

    for ctype in ("ci_shm_header_v1_t", "ci_shm_comm_entry_v1_t", "ci_shm_op_slot_v1_t"):
        assert s.SIZEOF[ctype] % s.CACHE_LINE == 0, ctype
    assert s.OFFSETOF["ci_shm_header_v1_t"]["ring_head"] % s.CACHE_LINE == 0
