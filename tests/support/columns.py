"""What "fits 80 columns" means for printed text, checked line by line: no line wider than the
terminal, no word broken at a hyphen across two lines, no number on one line and its unit on the
next. Returns the faults as readable strings (empty: it fits), so a failing test shows them all.
"""

from __future__ import annotations

import re

from rich.cells import cell_len

from repro.reporting.wrap import UNITS

WIDTH = 80
# A line ending inside a hyphenated word ("decode-log-"), not an arrow, a flag or a bare dash.
HYPHEN_END = re.compile(r"[A-Za-z0-9]-$")
NUMBER_END = re.compile(r"(?<![\w.:/-])\d+(?:\.\d+)?$")
UNIT_START = re.compile(r"^(?:" + "|".join(re.escape(u) for u in UNITS) + r")(?![\w/])")
FRAME = "│|╭╮╰╯─┃"  # a panel's or a table's border is not part of the text inside it


def _cells(line: str) -> str:
    """The text of a line with the borders of panels and tables taken off its ends."""
    return line.strip().strip(FRAME).strip()


def layout_faults(text: str, width: int = WIDTH, what: str = "output") -> list[str]:
    faults = []
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if cell_len(line.rstrip()) > width:
            faults.append(f"{what} line {number}: {cell_len(line.rstrip())} columns: {line.rstrip()[:100]}")
    for number, (line, following) in enumerate(zip(lines, lines[1:], strict=False), 1):
        # In a table, each cell wraps in its own column: compare the same column of both lines.
        for left, right in zip(_columns(line), _columns(following), strict=False):
            if HYPHEN_END.search(left) and re.match(r"[a-z]", right):
                faults.append(f"{what} lines {number}-{number + 1}: a word broken at a hyphen: "
                              f"{left[-20:]!r} / {right[:20]!r}")
            if re.search(r"\w=$", left) and re.match(r"\w", right):
                faults.append(f"{what} lines {number}-{number + 1}: a word broken after '=': "
                              f"{left[-20:]!r} / {right[:20]!r}")
            if NUMBER_END.search(left) and UNIT_START.match(right):
                faults.append(f"{what} lines {number}-{number + 1}: a number parted from its unit: "
                              f"{left[-20:]!r} / {right[:20]!r}")
    return faults


def _columns(line: str) -> list[str]:
    """The cells of a line: split at table dividers, or kept whole when there are none. A free
    text line is one cell; so is a panel's row (its frame taken off)."""
    inner = _cells(line)
    parts = [p.strip() for p in re.split(r"[│┃|]", inner)]
    return parts if len(parts) > 1 else [inner]
