"""A watch's canary cycles and canary waves.

A watch is a sequence of cycles. In each, one Driver per watched stack runs its canary
conversations (multi-round, kept-alive connections, a think time between rounds: what a harness
does, the one traffic shape a wedged keep-alive connection stalls); the cycle ends when they have
done their --rounds, and the next cycle starts fresh ones, numbered on. A Driver per cycle keeps
the history and the Driver's outcome list bounded by one cycle: the status keeps counts only.

Beside the cycles, every --canary-every, a wave of fresh-connection canaries to every hop: the
evidence wave of each stack's judge, so a stall's wave and these never double up.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from collections.abc import Awaitable, Callable

import anyio

from repro.core import events as ev
from repro.core.evidence_book import EvidenceBook
from repro.load.driver import Driver
from repro.session.watch_progress import WatchProgress
from repro.session.watch_settings import WatchSettings
from repro.session.watched_stack import WatchedStack

# A cycle that ended this fast (every round refused at once) waits the rest of it before the next:
# a dead hop costs a round a second at most, not a spin.
MIN_CYCLE_S = 1.0


class CanaryCycles:
    """The cycles of the stacks in `stacks` (the watch's own dict: stacks come and go between
    cycles). `refresh_model(stack)` asks an unlisted target again; `books()` are the evidence
    books fed now; `cycle_ended()` after each cycle of every stack."""

    def __init__(self, settings: WatchSettings, stacks: dict[str, WatchedStack], progress: WatchProgress, *,
                 emit: Callable[[ev.Event], None], origin: float, note: Callable[..., None],
                 refresh_model: Callable[[WatchedStack], Awaitable[None]],
                 books: Callable[[], list[EvidenceBook]], cycle_ended: Callable[[], None]) -> None:
        self.settings = settings
        self.stacks = stacks
        self.progress = progress
        self.emit = emit
        self.origin = origin
        self.note = note
        self.refresh_model = refresh_model
        self.books = books
        self.cycle_ended = cycle_ended
        self.numbers = itertools.count()  # conversation numbers, growing across cycles
        self.stopping = False
        self.cycling: list[WatchedStack] = []  # the stacks of the cycle running now

    def runs(self, stack: WatchedStack) -> bool:
        """Whether the cycle running now drives `stack` (its book is fed until that cycle ends)."""
        return any(each is stack for each in self.cycling)

    async def run(self) -> None:
        """Cycle after cycle until stopped."""
        s = self.settings
        while not self.stopping:
            started = time.monotonic()
            stacks = self.cycling = list(self.stacks.values())
            if stacks:
                async with anyio.create_task_group() as cycle:
                    for stack in stacks:
                        cycle.start_soon(self.cycle, stack)
                self.cycling = []
                self.cycle_ended()
            if self.stopping:
                return
            await anyio.sleep(max(s.driver.think_time, MIN_CYCLE_S - (time.monotonic() - started)))

    async def cycle(self, stack: WatchedStack) -> None:
        s = self.settings
        if not stack.conversations:  # hops only read (and canaried, when they take canaries)
            return
        ids = tuple(next(self.numbers) for _ in range(stack.conversations))
        if not stack.model_listed:  # it did not answer before: ask again
            await self.refresh_model(stack)
        self.progress.begin(ids, frozenset(h.name for h in stack.hops))
        config = dataclasses.replace(s.driver, base_url=stack.target, model=stack.model, conversations=len(ids),
                                     conversation_ids=ids)
        stack.driver = Driver(config, s.prompts, self.emit, origin=self.origin, judge=stack.judge)
        try:
            await stack.driver.run()
        except Exception as exc:  # noqa: BLE001  (what the stack did is judged; a bug here must not end the watch)
            self.note(f"cycle of conversations {ids[0]}..{ids[-1]} on {stack.name} ended by "
                      f"{type(exc).__name__}: {exc}", "error")
        finally:
            stack.driver = None  # its outcomes go with it: the status has the counts
            self.progress.end(ids)
            # Its rounds are judged (Driver.run waits for the judgements): the books forget them.
            for book in self.books():
                book.forget(set(ids))

    def stop(self) -> None:
        """No new round, no new cycle (a signal came, or the deadline)."""
        self.stopping = True
        for stack in self.stacks.values():
            if stack.driver is not None:
                stack.driver.stop_requested = True


async def canary_waves(stacks: dict[str, WatchedStack], *, every: float, now: Callable[[], float],
                       note: Callable[..., None],
                       judge_apis: Callable[[WatchedStack, float, float], None] | None = None) -> None:
    """A fresh-connection canary to every hop every `every` seconds (with an extra probe sample):
    the evidence wave of the stack's judge, so a stall's wave and these never double up. With
    more APIs (--api chat,messages), each one's canaries at the same time, then
    `judge_apis(stack, since, since_wall)`."""
    async def one_wave(stack: WatchedStack) -> None:
        since, since_wall = now(), time.time()
        try:
            async with anyio.create_task_group() as waves:
                waves.start_soon(functools.partial(stack.judge.wave.gather, since=since))
                for each in stack.apis:
                    if each.wave is not None:
                        waves.start_soon(functools.partial(each.wave.gather, since=since))
            if stack.apis and judge_apis is not None:
                judge_apis(stack, since, since_wall)
        except Exception as exc:  # noqa: BLE001
            note(f"canaries to {stack.name} failed: {type(exc).__name__}: {exc}")

    while True:
        async with anyio.create_task_group() as wave:
            for stack in list(stacks.values()):
                wave.start_soon(one_wave, stack)
        await anyio.sleep(every)
