"""The watch's live status page (placeholder: the status-page work replaces it)."""

from __future__ import annotations

import html
import json
from typing import Any


def render_status_page(status: dict[str, Any]) -> str:
    """The page for WatchStatus.to_dict()."""
    return f"<!doctype html><title>repro watch</title><pre>{html.escape(json.dumps(status, indent=2))}</pre>"
