"""Lines of prose that fit an 80-column terminal: wrapped at spaces, never inside a word (a URL
stays whole), and a number never parted from the word after it, its unit ("15 s", "600
requests/min"): on-call reads "every 15" at the end of one line and "s" on the next as a
different number.

rich wraps at spaces too, but at the console's width (a wide terminal, or COLUMNS, gives long
lines) and may leave a number at the end of a line and its unit at the start of the next.
"""

from __future__ import annotations

import re
import textwrap

WIDTH = 80
# Joins a number to its unit while wrapping: textwrap breaks only at ASCII whitespace.
_GLUE = "\u00a0"
_NUMBER = r"(?<!\S)[~(]?[-+]?\d[\d.,]*"
# A rate keeps its words with it ("9600 completion tokens/min"); else the next word is the unit.
_RATE = re.compile(_NUMBER + r" (?:[A-Za-z_-]+ )?\S*/\S")
_NUMBER_THEN_WORD = re.compile("(" + _NUMBER + r") (?=\S)")


def fitted(text: str, width: int = WIDTH, indent: str = "") -> list[str]:
    """`text` as lines of at most `width` columns (a single word longer than that stays whole on a
    line of its own); lines after the first start with `indent`."""
    glued = _RATE.sub(lambda m: m.group(0).replace(" ", _GLUE), text)
    glued = _NUMBER_THEN_WORD.sub(lambda m: m.group(1) + _GLUE, glued)
    lines = textwrap.wrap(glued, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
    return [line.replace(_GLUE, " ") for line in lines] or [""]
