"""Text wrapped for a terminal as a reader expects: at spaces only, a number kept with its unit.

Both wrappers this house leans on get it wrong at 80 columns: argparse's textwrap breaks a word at
its hyphens (`decode-log-` / `interval`) and chops a long one anywhere (`per=` / `conn|global`);
rich breaks at any space, so `no byte for 2.1` ends a line and `s` starts the next. Here the break
offsets are computed once, for the help text (`wrap`) and for a panel's cells (`Wrapped`): a break
only at a space that is not between a number and its unit; a word wider than the whole line breaks
before a bracket or after a comma or a bar (a flag's syntax), and only past that is it folded.
"""

from __future__ import annotations

import re

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

# The units printed after a number, with a space: "2.1 s", "7 ms", "512 B", "3.2 tok/s".
UNITS = ("ms", "µs", "us", "s", "min", "h", "B", "KB", "MB", "GB", "KiB", "MiB", "GiB", "tok/s", "tokens/s",
         "req/s", "rounds/s")
UNIT_GAP = re.compile(r"(?<=\d) (?=(?:" + "|".join(re.escape(u) for u in UNITS) + r")(?![\w/]))")
# Inside a word too wide for the line: before an opening bracket, or after a comma or a bar that
# does not open one (`NAME[=VALUE]` / `[,per=conn|global]`, never `[,` / `per=`).
WORD_BREAK = re.compile(r"(?=\[)|(?<=[^\[][,|])")


def glued(text: str) -> str:
    """The text with each number-unit space made a non-space of the same width: no break there."""
    return UNIT_GAP.sub("_", text)


def break_offsets(line: str, width: int) -> list[int]:
    """Where to break one line (no newline in it) so that each part fits `width` cells: each
    offset is a word's start, or a place inside a word wider than the whole line."""
    width = max(width, 1)
    offsets: list[int] = []
    start = 0  # the current line's first character
    for word in re.finditer(r"\S+", glued(line)):
        position = word.start()
        for piece in _pieces(word.group(), width):
            end = position + len(piece)
            if position > start and cell_len(line[start:end]) > width:
                offsets.append(position)
                start = position
            position = end
    return offsets


def _pieces(word: str, width: int) -> list[str]:
    """A word as the parts it may break into: itself when it fits, else at WORD_BREAK, each part
    still too wide folded at the width (the last resort: a 100-character token)."""
    if cell_len(word) <= width:
        return [word]
    pieces: list[str] = []
    for part in (p for p in WORD_BREAK.split(word) if p):
        while cell_len(part) > width:
            cut = width
            while cell_len(part[:cut]) > width:
                cut -= 1
            pieces.append(part[:max(cut, 1)])
            part = part[max(cut, 1):]
        pieces.append(part)
    return pieces


def wrap(text: str, width: int) -> list[str]:
    """The lines of `text` (its own newlines kept) within `width` cells, trailing spaces dropped."""
    lines: list[str] = []
    for line in text.split("\n"):
        cuts = [0, *break_offsets(line, width), len(line)]
        lines += [line[a:b].rstrip() for a, b in zip(cuts, cuts[1:], strict=False)]
    return lines


class Wrapped:
    """A table cell's text, wrapped by `break_offsets` at the width rich gives the cell; styled as
    rich styles a plain string cell (markup and highlighting)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        text = console.render_str(self.text)
        lines = []
        for line in text.split("\n", allow_blank=True):
            for part in line.divide(break_offsets(line.plain, options.max_width)):
                part.rstrip()
                lines.append(part)
        yield Text("\n").join(lines)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        plain = console.render_str(self.text).plain
        longest_word = max((cell_len(w) for w in glued(plain).split()), default=0)
        longest_line = max((cell_len(line) for line in plain.split("\n")), default=0)
        return Measurement(longest_word, longest_line).clamp(max_width=options.max_width)
