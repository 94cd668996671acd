"""How the watched set changed between two discoveries: which hops came, which went.

Pure. A hop is the same hop when both its name and its URL are: a name that now points elsewhere
(a pod rescheduled onto a new address under the same label) is the old hop gone and a new one
come, so nothing read from the old address is carried over to the new one.
"""

from __future__ import annotations

from repro.core.hop import Hop


def hop_changes(old: list[Hop], new: list[Hop]) -> tuple[list[Hop], list[Hop]]:
    """(added, removed), each in the order of the list it comes from."""
    old_keys = {(h.name, h.url) for h in old}
    new_keys = {(h.name, h.url) for h in new}
    return [h for h in new if (h.name, h.url) not in old_keys], [h for h in old if (h.name, h.url) not in new_keys]


def describe_hop_changes(added: list[Hop], removed: list[Hop]) -> str:
    """One line for the log: 'hops: 1 added, 1 removed: -engine-0 (http://...), +engine-2 (http://...)';
    a hop that moved reads as its old address removed and its new one added under the same name.
    Empty when nothing changed."""
    if not added and not removed:
        return ""
    parts = [f"-{h.name} ({h.url})" for h in removed] + [f"+{h.name} ({h.url})" for h in added]
    return f"hops: {len(added)} added, {len(removed)} removed: " + ", ".join(parts)


def capped_hops(kept: list[Hop], found: list[Hop], cap: int) -> list[Hop]:
    """At most `cap` of the hops `found`: those in `kept` (watched already) first, then new ones
    in the order found. A fleet larger than the cap does not swap hops in and out at every
    discovery (each swap would forget a hop's history and make a new one's): the watched stay."""
    kept_keys = {(h.name, h.url) for h in kept}
    staying = [h for h in found if (h.name, h.url) in kept_keys]
    return [*staying, *[h for h in found if (h.name, h.url) not in kept_keys]][:cap]
