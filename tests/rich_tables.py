"""A boxed rich table read back from the text the table format printed: for tests that check
what a table says when its cells were folded onto more lines to fit the width."""

from __future__ import annotations


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the boxed tables in `text`, each a list of its cells' text. A row's
    first line has a non-empty first cell and its continuation lines an empty one (so the first
    column must be one that never folds: a number, a short key). A cell's pieces are joined
    with nothing between them: a folded word comes back whole, a space that wrapping took does
    not (compare with `squeezed` values)."""
    rows: list[list[list[str]]] = []
    for line in text.splitlines():
        if not line.startswith("│"):
            continue
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if cells[0] or not rows or len(rows[-1]) != len(cells):
            rows.append([[cell] for cell in cells])
        else:
            for pieces, cell in zip(rows[-1], cells, strict=True):
                pieces.append(cell)
    return [["".join(pieces) for pieces in row] for row in rows]


def squeezed(text: str) -> str:
    """`text` without whitespace: what is left of it however the table format wrapped it."""
    return "".join(text.split())
