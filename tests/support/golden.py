"""Console output compared to stored text (tests/fixtures/console/NAME.txt; the verdict panels in
its panels/ folder), and the two rules every table printed for people keeps: no line wider than
the terminal, no word broken.

Regenerate the stored text after a deliberate change, then read the diff before committing:

    REPRO_UPDATE_GOLDEN=1 python -m pytest -q tests/reporting/test_run_console.py \
        tests/commands/test_triage_probe_console.py tests/reporting/test_verdict_panel.py
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "console"


def render_text(renderable: Any, width: int) -> str:
    """What `renderable` prints in a terminal of `width` columns, without colour; trailing spaces dropped."""
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False, legacy_windows=False)
    console.print(renderable)
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines()) + "\n"


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("REPRO_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} missing: regenerate with REPRO_UPDATE_GOLDEN=1 (see tests/support/golden.py)"
    assert text == path.read_text(encoding="utf-8"), f"output differs from {path}:\n{text}"


def assert_fits(text: str, width: int) -> None:
    wide = [line for line in text.splitlines() if len(line) > width]
    assert not wide, f"lines over {width} columns: {wide}"


def assert_words_whole(text: str, words: Iterable[str]) -> None:
    """Each word (of headers and values) is printed whole somewhere: none split over two lines."""
    tokens = set(text.split())
    broken = [word for word in words if word not in tokens]
    assert not broken, f"words broken or missing: {broken}\n{text}"


UNITS = ("s", "ms", "B", "KiB", "MiB", "min", "h")


def assert_units_kept(text: str) -> None:
    """No line ends with a number whose unit starts the next line ("20" / "s (keep-alive ...")."""
    rows = text.splitlines()
    parted = [(a, b) for a, b in zip(rows, rows[1:], strict=False)
              if a.rstrip()[-1:].isdigit() and b.split()[:1] and b.split()[0].rstrip(",;:)") in UNITS]
    assert not parted, parted
