"""What repro's HTML pages share (report.html, bench.html): one style sheet, and values written as
page text. Self-contained pages: inline CSS, plotly.js inline (repro.reporting.plots), no external
asset. The page follows the window: text wraps, charts take their box's width, a table wider than
the window scrolls in its own box, so the page itself never scrolls sideways."""

from __future__ import annotations

import html
from typing import Any

from repro.core.text import number

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f4f4f4}.verdict{border-left:6px solid #e53935;padding:8px 12px;margin:10px 0;background:#fafafa}
.verdict.client{border-color:#fb8c00}.verdict.unknown{border-color:#9e9e9e}
.note{color:#8d6e63}code{background:#f2f2f2;padding:0 3px}
code,li{overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%}table.text td{text-align:left}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,560px),1fr));gap:12px 20px}
.chart{min-width:0;border:1px solid #eee;border-radius:4px;padding:4px}
"""


def html_text(value: Any) -> str:
    """A value as page text, escaped; a missing one reads `-`, never `None`."""
    return html.escape("-" if value is None else str(value), quote=True)


def html_number(value: Any) -> str:
    """A number as people write it (repro.core.text.number), `-` when missing; anything else as text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return html_text(number(value))
    return html_text(value)
