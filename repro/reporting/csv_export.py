"""The figures behind a page as CSV beside it (rounds.csv for report.html, levels.csv for
bench.html): for a spreadsheet or pandas, linked from the page. The stdlib csv module; a missing
value is an empty cell."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({key: "" if row.get(key) is None else row[key] for key in columns})
    return path
