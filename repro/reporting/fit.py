"""Tables that fit the terminal without breaking a word: an 80-column console as on-call has it.

rich shrinks a table that is too wide by cutting its widest wrappable columns, down to a few
characters if it must, and then folds words and truncates headers (`stall…`, `stalle / d`). Here
the widths are chosen before rich sees the table: figures keep their values on one line (their
headers may go over two), the columns a caller names as shrinkable wrap at spaces, never below
their longest word, in the way that makes the table shortest; and the widths are fixed, so rich
only wraps at spaces. A column marked `cut` (an address) is cut as the last resort, its port kept.
Values that could not fit even so are the caller's to shorten (`first_words`, `short_url`) or to
move out of the table (`table_with_notes`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from rich import box
from rich.cells import cell_len
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

MIN_CUT = 12  # a cut value keeps at least this many characters
REBALANCE_ROWS = 60  # tables taller than this keep the first fit: rebalancing costs rows x width

# Between two columns: the divider and one space of padding (right of each cell but the last).
GAP = 2


@dataclass(frozen=True)
class Col:
    header: str
    justify: str = "left"  # "right" for figures
    shrink: bool = False  # may wrap (at spaces) to make room for the others
    # May be cut (one long word: a URL) when nothing else makes room: short_address keeps its port.
    cut: bool = False


def plain(cell: str) -> str:
    """A cell's text as printed (rich markup removed)."""
    return Text.from_markup(cell).plain


def longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


def widest_line(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def lines_at(text: str, width: int) -> int:
    """How many lines `text` takes in `width` cells, wrapped at spaces as rich wraps it."""
    return sum(max(1, len(textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False)))
               for line in text.splitlines() or [""])


def table_height(cells: Sequence[Sequence[str]], widths: Sequence[int]) -> tuple[int, int, int]:
    """The lines of all rows (`cells` column by column) at these widths, then of the tallest row,
    then of all cells: of two layouts as tall, the one with no very tall row and fewer cells
    wrapped reads better."""
    rows = len(cells[0]) if cells else 0
    heights = [[lines_at(column[r], w) for column, w in zip(cells, widths, strict=True)] for r in range(rows)]
    return (sum(max(h) for h in heights), max((max(h) for h in heights), default=0),
            sum(sum(h) for h in heights))


def rebalanced(cells: Sequence[Sequence[str]], widths: list[int], floor: Sequence[int],
               shrinkable: Sequence[int]) -> list[int]:
    """`widths` with room moved between shrinkable columns while that makes the table shorter (see
    table_height): narrowing one column a character at a time can leave one cell wrapped over four
    lines where giving it back a few would take them from a cell that wraps anyway."""
    if len(shrinkable) < 2 or len(cells[0]) > REBALANCE_ROWS:
        return widths
    best = table_height(cells, widths)
    improved = True
    while improved:
        improved = False
        for i in shrinkable:
            for j in shrinkable:
                base = widths
                for moved in range(1, base[j] - floor[j] + 1) if i != j else ():  # from j to i
                    trial = list(base)
                    trial[i] += moved
                    trial[j] -= moved
                    height = table_height(cells, trial)
                    if height < best:
                        best, widths, improved = height, trial, True
    return widths


def two_lines(header: str) -> int:
    """The width of `header` split at one space into two lines, the narrowest such split."""
    words = header.split()
    return min((max(cell_len(" ".join(words[:k])), cell_len(" ".join(words[k:]))) for k in range(1, len(words))),
               default=cell_len(header))


def column_widths(columns: Sequence[Col], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """Each column's width: its widest line when everything fits; else the figures' headers over two
    lines ("TTFT p50 ms" as "TTFT" / "p50 ms" is still read), then the shrinkable columns narrowed
    (never below their longest word) the way that adds fewest lines, then a `cut` column cut."""
    natural, floor = [], []
    for i, col in enumerate(columns):
        header = plain(col.header)
        cells = [plain(row[i]) for row in rows]
        natural.append(max(widest_line(t) for t in [header, *cells]))
        cell_floor = (max((longest_word(t) for t in cells), default=0) if col.shrink
                      else max((widest_line(t) for t in cells), default=0))
        floor.append(max(cell_floor, longest_word(header) if col.shrink else two_lines(header)))
    widths = list(natural)
    excess = sum(widths) + GAP * (len(columns) - 1) - width
    # Figures first, all together so that the header row reads evenly: their headers go over two
    # lines; then the shrinkable columns give up room, a character at a time.
    if excess > 0:
        for i, col in enumerate(columns):
            if not col.shrink:
                excess -= widths[i] - floor[i]
                widths[i] = floor[i]
    # The header row counts too: a header over two lines costs a line as a cell does.
    cells = [[plain(col.header), *(plain(row[i]) for row in rows)] for i, col in enumerate(columns)]
    while excess > 0:
        # The narrowing that adds the fewest lines to the table, the widest column on a tie.
        options = [(*table_height(cells, [w - (j == i) for j, w in enumerate(widths)]), -widths[i], i)
                   for i, col in enumerate(columns) if col.shrink and widths[i] > floor[i]]
        if not options:
            break  # no room left without breaking a word: the caller shortens values or moves them out
        *_, i = min(options)
        widths[i] -= 1
        excess -= 1
    widths = rebalanced(cells, widths, floor, [i for i, col in enumerate(columns) if col.shrink])
    for i, col in enumerate(columns):  # the last resort: cut the long words of a `cut` column
        if excess > 0 and col.cut:
            cut_to = max(MIN_CUT, widths[i] - excess, longest_word(plain(col.header)))
            excess -= widths[i] - cut_to
            widths[i] = min(widths[i], cut_to)
    return widths


def fits(widths: Sequence[int], width: int) -> bool:
    return sum(widths) + GAP * (len(widths) - 1) <= width


def fitted_table(columns: Sequence[Col], rows: Sequence[Sequence[str]], *, width: int, title: str | None = None,
                 caption: str | None = None) -> Table:
    """A rich Table of `rows` whose columns fit `width` cells (see column_widths)."""
    widths = column_widths(columns, rows, width)
    rows = [[escape(short_address(plain(cell), w)) if col.cut and cell_len(plain(cell)) > w else cell
             for cell, col, w in zip(row, columns, widths, strict=True)] for row in rows]
    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for col, w in zip(columns, widths, strict=True):
        table.add_column(col.header, justify=col.justify, width=w, overflow="fold")  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*row)
    return table


def first_words(text: str, limit: int) -> str:
    """`text`'s first words within `limit` characters, ' …' when some were left out: an error is
    read by its start ("ReadTimeout: no byte in 10 s …"); the whole text stays in the log."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    short = textwrap.shorten(text, width=limit, placeholder=" …")
    return short if short != "…" else text[: limit - 1] + "…"


def short_address(text: str, width: int) -> str:
    """`text` (an address) in `width` characters: its path dropped first, then its host cut before
    the port ('https://gatew…:8443'): the host's start and the port tell two pages apart; the
    whole address is in --json."""
    if cell_len(text) <= width:
        return text
    scheme, sep, rest = text.rpartition("://")
    host_port = rest.split("/", 1)[0]
    text = scheme + sep + host_port
    if cell_len(text) <= width:
        return text
    colon = text.rfind(":")
    tail = text[colon:] if colon > len(scheme + sep) else ""
    head = width - len(tail) - 1
    if head < 4:  # no room for the port and some of the host: keep both ends
        head = (width - 1) // 2
        tail = text[len(text) - (width - 1 - head):]
    return text[:head] + "…" + tail


def short_url(url: str) -> str:
    """host:port and the path's last part, which is what tells two hops apart: 'http://127.0.0.1:30000
    /v1/metrics' -> '127.0.0.1:30000/…/metrics'. https is kept (it says TLS); the query is dropped."""
    parts = urlsplit(url)
    if not parts.netloc:
        return url
    path = parts.path.rstrip("/")
    segments = [s for s in path.split("/") if s]
    tail = "" if not segments else "/" + segments[0] if len(segments) == 1 else "/…/" + segments[-1]
    return ("https://" if parts.scheme == "https" else "") + parts.netloc + tail


# A notes column narrower than this is hard to read: the notes go under the table instead.
NOTES_COLUMN_MIN = 24


def table_with_notes(columns: Sequence[Col], rows: Sequence[Sequence[str]], notes: Sequence[str],
                     labels: Sequence[str], *, note_header: str, width: int, title: str | None = None) -> Group:
    """`rows` with a last column of notes (errors, mostly) when it gets NOTES_COLUMN_MIN cells or more;
    else the table without it and, under it, one line a row that has a note: "<label>: <note>",
    shortened to the width. Rows whose first cell is "…" (rows left out) take no note."""
    if not any(notes):
        return Group(fitted_table(columns, rows, width=width, title=title))
    with_notes = [[*row, note] for row, note in zip(rows, notes, strict=True)]
    all_columns = [*columns, Col(note_header, shrink=True)]
    widths = column_widths(all_columns, with_notes, width)
    if widths[-1] >= NOTES_COLUMN_MIN and fits(widths, width):
        return Group(fitted_table(all_columns, with_notes, width=width, title=title))
    under = [Text(f"{label}: " + first_words(plain(note), width - cell_len(label) - 2))
             for label, note in zip(labels, notes, strict=True) if note]
    return Group(fitted_table(columns, rows, width=width, title=title), *under)
