"""A watch's discovery of its hops: Prometheus asked at the start and every --discover-every,
what came and went said in the log and counted in the status; on no answer the last set is kept
(said once an outage, not at every ask)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from repro.core.errors import ReproError
from repro.core.hop import Hop
from repro.core.watch_status import HOPS_WATCHED_MAX, WatchStatus
from repro.session.watch_settings import WatchSettings


class HopDiscovery:
    """The hops discovered so far; `note(message, level)` says what changed, `changed()` is
    awaited once the set changed (the watch remakes its stacks)."""

    def __init__(self, settings: WatchSettings, status: WatchStatus, *, note: Callable[..., None],
                 changed: Callable[[], Awaitable[None]]) -> None:
        self.settings = settings
        self.status = status
        self.note = note
        self.changed = changed
        self.discovered: list[Hop] = []
        self.failing = False  # the last discovery got no answer (said once, until it answers)
        self.over_cap = False  # the last discovery found more hops than watched (said once, until not)

    async def discover(self, *, first: bool = False) -> None:
        """Re-read the hops from Prometheus; on no answer keep the last set (said in the log)."""
        from probes.discovery import discover_hops  # written beside this module; absent: a usage error at start
        from probes.fleet import FleetError
        from repro.core.hop_changes import hop_changes

        s = self.settings
        try:
            found = await discover_hops(s.prometheus, s.selector, timeout=5.0, name_label=s.name_label)
        except FleetError:
            if first:
                raise
            return
        except ReproError as exc:
            if not self.failing:  # said once an outage, not every --discover-every
                self.note(f"discovery: {exc}; keeping the last {len(self.discovered)} hops until it answers")
            self.failing = True
            return
        if self.failing:
            self.note("discovery: Prometheus answers again", "info")
            self.failing = False
        found = self._capped(found)
        added, removed = hop_changes(self.discovered, found)
        if not (added or removed):
            return
        if not first:  # the first set is the start's (its lines and RunStarted say it), not a change
            for hop in added:
                self.note(f"hop added: {hop.name} {hop.url} ({hop.role})", "info")
            for hop in removed:
                self.note(f"hop removed: {hop.name} {hop.url}", "info")
            self.status.hops_changed(added=len(added), removed=len(removed))
        self.discovered = list(found)
        await self.changed()

    def _capped(self, found: list[Hop]) -> list[Hop]:
        """At most HOPS_WATCHED_MAX hops watched, the given ones counted: those watched already stay."""
        from repro.core.hop_changes import capped_hops

        room = max(0, HOPS_WATCHED_MAX - len(self.settings.hops))
        if len(found) > room and not self.over_cap:
            self.note(f"discovery: {len(found)} hops found, {room} watched (at most {HOPS_WATCHED_MAX} hops a "
                      "watch, docs/watch-memory.md): narrow --selector, or run a watch per part of the fleet")
        self.over_cap = len(found) > room
        return capped_hops(self.discovered, list(found), room)

    async def follow(self) -> None:
        """Discover again every --discover-every, for ever (cancelled with the watch)."""
        while True:
            await anyio.sleep(self.settings.discover_every)
            try:
                await self.discover()
            except Exception as exc:  # noqa: BLE001  (a discovery that breaks is said, never fatal)
                self.note(f"discovery failed: {type(exc).__name__}: {exc}; keeping the last set")
