"""The home's paths are spelled through the names generated from the home protocol
(protocols/home/v1): no Python module joins a path with an entry's name written by hand, and
no C source of the Profiler writes one as a string literal; every entry the schema names is
used somewhere, so the schema says what the home holds and nothing else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from comminsight_gen import home_v1_names

ROOT = Path(__file__).resolve().parents[2]
NAMES = {
    value
    for key, value in vars(home_v1_names).items()
    if key.isupper() and isinstance(value, str) and key != "PROTOCOL_VERSION"
}


def _joined_by_hand(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every `path / "name"`, `"name" / x` and `.joinpath("name")` with a
    home entry's name as a literal."""
    found = []
    for node in ast.walk(tree):
        parts: list[ast.AST] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [node.left, node.right]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "joinpath":
            parts = list(node.args)
        for part in parts:
            if isinstance(part, ast.Constant) and part.value in NAMES:
                found.append((part.lineno, part.value))
    return sorted(found)


def test_no_python_module_joins_a_home_path_by_hand():
    offenders = []
    for path in sorted((ROOT / "comminsight").rglob("*.py")):
        for line, name in _joined_by_hand(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{path.relative_to(ROOT)}:{line}: {name!r}")
    assert not offenders, "spell these through comminsight_gen.home_v1_names:\n" + "\n".join(
        offenders
    )


def test_the_check_finds_a_path_joined_by_hand():
    tree = ast.parse('home / "metadata" / x\nPath(h).joinpath("inspector_logs")\nh / "other"')
    assert _joined_by_hand(tree) == [(1, "metadata"), (2, "inspector_logs")]


def test_no_profiler_source_spells_a_home_entry():
    literal = re.compile(r'"((?:[^"\\]|\\.)*)"')
    offenders = []
    for path in sorted((ROOT / "profiler" / "src").glob("*.[ch]")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//", 1)[0]
            if code.lstrip().startswith(("*", "/*")):
                continue  # a comment
            for text in literal.findall(code):
                segments = [s for s in re.split(r"[/%]", text) if s]
                if text in NAMES or any(s in NAMES for s in segments if s == text.strip("/")):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {text!r}")
    assert not offenders, "spell these through comminsight/home_v1.h:\n" + "\n".join(offenders)


def test_every_entry_of_the_schema_is_used():
    sources = [p.read_text() for p in (ROOT / "comminsight").rglob("*.py")]
    sources += [p.read_text() for p in (ROOT / "profiler" / "src").glob("*.[ch]")]
    text = "\n".join(sources)
    unused = [
        key
        for key in vars(home_v1_names)
        if key.isupper()
        and key != "PROTOCOL_VERSION"
        and f"home_names.{key}" not in text
        and f"CI_HOME_V1_{key}" not in text
    ]
    assert not unused, unused
