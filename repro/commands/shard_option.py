"""`repro run --shard K/N`: which slice of the conversations this process drives, so N runs (on
N machines, or the N pods of an Indexed Job) drive together what one run would.

K counts from 0, as Kubernetes numbers an Indexed Job's pods; `--shard env/N` reads K from
JOB_COMPLETION_INDEX, which Kubernetes sets in each of those pods, so the Job's manifest needs
no shell to put it into the arguments.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from repro.core.errors import UsageError

INDEX_VARIABLE = "JOB_COMPLETION_INDEX"
FROM_ENVIRONMENT = "env"
SHARD = re.compile(r"(\d+|env)/(\d+)")


@dataclass(frozen=True)
class Shard:
    index: int  # 0 .. count - 1
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def folder(self) -> str:
        """The shard's run folder inside --out: N shards can write to one shared volume."""
        return f"shard-{self.index}"


def parse_shard(text: str, environ: Mapping[str, str] | None = None) -> Shard:
    """--shard K/N or env/N, checked: one line naming the input and the fix when it cannot be used."""
    environ = os.environ if environ is None else environ
    match = SHARD.fullmatch(text.strip())
    if match is None:
        raise UsageError(f"--shard {text!r} is not K/N: give the slice to run and how many there are, "
                         f"e.g. --shard 0/3 (K counts from 0), or env/3 to read K from ${INDEX_VARIABLE}")
    index_text, count = match.group(1), int(match.group(2))
    if count < 1:
        raise UsageError(f"--shard {text}: N is the number of shards, at least 1")
    if index_text == FROM_ENVIRONMENT:
        index_text = environ.get(INDEX_VARIABLE, "")
        if not index_text.strip().isdigit():
            found = f"is {index_text!r}" if index_text else "is not set"
            raise UsageError(f"--shard {text} reads K from ${INDEX_VARIABLE}, which {found}: run it in a pod of an "
                             f"Indexed Job (Kubernetes sets it there), or give K itself, e.g. --shard 0/{count}")
    index = int(index_text)
    if index >= count:
        raise UsageError(f"--shard {index}/{count}: K counts from 0, so it is below N (0 to {count - 1})")
    return Shard(index, count)
