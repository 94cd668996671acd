"""What a verdict ruled out, kept by hop until the verdict is made: the hop it blames is then
left out, whatever was said of it on the way (a hop is where the fault is or ruled out, never
both; what its own fresh canary showed stays in its evidence entries)."""

from __future__ import annotations


class RuledOut:
    """(hop, what was seen of it) in the order said; `lines(where)` is the verdict's list."""

    def __init__(self) -> None:
        self._said: list[tuple[str, str]] = []

    def add(self, hop: str, text: str) -> None:
        self._said.append((hop, text))

    def lines(self, where: str | None) -> list[str]:
        return [f"{hop}: {text}" for hop, text in self._said if hop != where]
