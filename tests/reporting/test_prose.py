"""fitted: prose wrapped to 80 columns at spaces, a word never cut, a number kept with its unit."""

from __future__ import annotations

import re

import pytest

from repro.reporting.prose import fitted

pytestmark = pytest.mark.timeout(30)

BANNER = ("cost: at most 600 chat requests/min (2 conversations, a round per 0.2 s), 9600 completion tokens/min "
          "(max_tokens 16), ~27600 prompt tokens/min")


@pytest.mark.parametrize("width", [80, 60, 41, 33])
def test_lines_fit_and_every_word_and_number_with_its_unit_is_whole(width):
    lines = fitted(BANNER, width, indent="      ")
    assert all(len(line) <= width for line in lines), lines
    assert " ".join(" ".join(lines).split()) == BANNER  # nothing lost, nothing cut
    for line in lines:
        assert not re.search(r"(^|\s)[~(]?\d[\d.,]*$", line), f"a number left without its unit: {line!r}"
    text = "\n".join(lines)
    for whole in ("600 chat requests/min", "0.2 s", "9600 completion tokens/min", "~27600 prompt tokens/min",
                  "(2 conversations"):
        assert whole in text, (whole, lines)


def test_a_word_longer_than_the_line_stays_whole_on_a_line_of_its_own():
    url = "http://127.0.0.1:9/" + "x" * 90
    lines = fitted(f"watching: engine-0 {url} and more", 80, indent="  ")
    assert "  " + url in lines and all(len(line) <= 80 for line in lines if url not in line)


def test_continuation_lines_take_the_indent():
    lines = fitted("warning: " + "word " * 40, 80, indent="  ")
    assert len(lines) > 1 and all(line.startswith("  ") for line in lines[1:])
