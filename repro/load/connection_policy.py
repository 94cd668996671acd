"""How the aiohttp client shares connections between conversations (--connections): its own module,
below repro/load/clients/, so the clients and the package that picks among them both import it
without an import circle."""

from __future__ import annotations

from repro.core.errors import UsageError

CONNECTION_POLICIES = "per-conversation|pool=N|fresh"


def parse_connections(text: str) -> tuple[str, int]:
    """'per-conversation' | 'fresh' | 'pool=N' -> (policy, pool size; 0 unless pooled)."""
    if text in ("per-conversation", "fresh"):
        return text, 0
    name, _, size = text.partition("=")
    if name == "pool" and size.isdigit() and int(size) > 0:
        return "pool", int(size)
    raise UsageError(f"--connections {text!r} is not one of {CONNECTION_POLICIES}; give e.g. pool=8")
