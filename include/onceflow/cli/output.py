"""How the commands print: plain-text tables an operator reads in a terminal (--json is each
command's own), and errors of several lines indented under the line that names them."""

from __future__ import annotations

from collections.abc import Sequence


def table(rows: list[dict], columns: Sequence[str]) -> str:
    """`rows` as aligned columns under a header line; a None cell is left empty."""
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def indented(text: str, by: int = 4) -> str:
    """Continuation lines of a multi-line error, indented under the line that names it."""
    return text.replace("\n", "\n" + " " * by)
