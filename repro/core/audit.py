"""`repro audit`'s judgement: what was measured on each hop in, findings out. Pure (no I/O).

A finding is a hang or failure that a healthy stack will have later, read from its settings:
- keepalive-mismatch: a side keeps idle connections to the hop behind it longer than that hop
  keeps them open, so a reused connection can meet the hop's close (a reset, an EOF, a proxy's
  502): sglang#20851 (smg's 50 s pool over SGLang's 5 s), NVIDIA/srt-slurm#283 (nginx's 75 s).
- body-limit-ahead: a hop refuses request bodies above a size the conversation's history reaches
  within the horizon.
- context-limit-ahead: the engine's context is reached within the horizon.
A limit alone is no finding: only one the projected growth reaches within `horizon` rounds.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from repro.core.kinds import Side

AuditKind = Literal["keepalive-mismatch", "body-limit-ahead", "context-limit-ahead"]

# How long each client library keeps an idle pooled connection before dropping it, by default:
# aiohttp TCPConnector(keepalive_timeout=15.0) (aiohttp/connector.py), httpx Limits(keepalive_expiry=5.0)
# (httpx/_config.py), the openai SDK's DEFAULT_CONNECTION_LIMITS sets no expiry, so httpx's 5 s.
CLIENT_POOL_IDLE_S = {"aiohttp": 15.0, "httpx": 5.0, "openai": 5.0, "openai-async": 5.0}

# Characters per token, to turn a conversation's characters into an engine's tokens: English
# text under the common BPE tokenizers runs 3.5 to 4.5; 4 is the usual rule, stated in the evidence.
CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True)
class RaceOutcome:
    """A race probe: `pairs` pairs of requests, each pair on one kept-alive connection, about `gap_s` apart."""

    target: str  # the hop the pairs were sent to
    gap_s: float
    pairs: int
    failed: int  # second requests that met a reset, an EOF or a 502/503/504
    failures: tuple[str, ...] = ()  # what each failure was ("reset", "eof", "http 502")
    # The second request on the first's connection (the client's pool reuses it), or on a fresh one
    # (what the hop reuses is then its own pooled connection to the hop behind).
    same_connection: bool = True

    def sent(self) -> str:
        return ("on the same connection" if self.same_connection
                else "on a fresh connection (so the hop's own upstream pool is what is reused)")

    def failures_text(self) -> str:
        counts = Counter(self.failures)
        return ", ".join(f"{n} {what}" if n > 1 else what for what, n in counts.items())


@dataclass(frozen=True)
class HopAudit:
    """One hop's measurements, each with how it was obtained (None: not measured, or no limit up to the bound)."""

    name: str
    role: str
    keepalive_timeout_s: float | None = None  # None: still open at keepalive_limit_s (or not measured)
    keepalive_limit_s: float = 0.0
    keepalive_how: str = "not measured"
    max_body_bytes: int | None = None  # the largest body accepted; None: no limit up to body_cap_bytes
    body_cap_bytes: int = 0
    body_step_bytes: int = 0
    body_how: str = "not measured"
    context_tokens: int | None = None
    context_how: str = "not measured"
    upstream_keepalive_s: float | None = None  # how long it pools idle connections to the hop behind, when known
    upstream_how: str = ""

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Growth:
    """How a conversation's request grows: its first round's body, and bytes (and characters) per round."""

    first_bytes: int
    per_round_bytes: int
    how: str  # "run defaults (...)", "--growth-per-round", "run RUN_DIR: ..."


@dataclass(frozen=True)
class Finding:
    side: Side
    where: str
    kind: AuditKind
    evidence: tuple[str, ...]
    suspected: tuple[str, str] | None = field(default=None, compare=False)  # (front, behind) for a race probe

    def to_dict(self) -> dict:
        return {"side": self.side, "where": self.where, "kind": self.kind, "evidence": list(self.evidence)}


def round_reaching(limit: float, first: float, per_round: float) -> int | None:
    """The first round (1-based) whose request reaches `limit`, growing `per_round` from `first`; None: never."""
    if first >= limit:
        return 1
    if per_round <= 0:
        return None
    return 1 + math.ceil((limit - first) / per_round)


def kib(n: float) -> str:
    """A size as people read it: bytes below 10 KiB, else KiB (one decimal at most), MiB from 1 MiB."""
    if n < 10240:
        return f"{int(n)} B"
    if n >= 1048576:
        return f"{n / 1048576:.1f}".removesuffix(".0") + " MiB"
    return f"{n / 1024:.1f}".removesuffix(".0") + " KiB"


def keepalive_pairs(hops: list[HopAudit], client: str, client_idle_s: float) -> list[tuple[str, float, str, HopAudit]]:
    """Each side that reuses idle connections to a hop, with how long it keeps them: the client in
    front of the first hop, each hop in front of the next (its own pool when known, else the client's:
    a hop whose pool is not measurable from outside is assumed to keep them as the client does)."""
    pairs = [(f"client ({client})", client_idle_s, f"{client}'s pool keeps idle connections {client_idle_s:g} s", hops[0])]
    for front, behind in zip(hops, hops[1:], strict=False):
        if front.upstream_keepalive_s is not None:
            idle, how = front.upstream_keepalive_s, f"{front.name} pools idle upstream connections " \
                                                    f"{front.upstream_keepalive_s:g} s ({front.upstream_how})"
        else:
            idle, how = client_idle_s, (f"{front.name}'s upstream pool is not measurable from outside: taken as "
                                        f"the client's ({client}: {client_idle_s:g} s)")
        pairs.append((front.name, idle, how, behind))
    return pairs


def audit_findings(hops: list[HopAudit], *, client: str, client_idle_s: float, growth: Growth, horizon: int,
                   races: dict[tuple[str, str], RaceOutcome] | None = None) -> list[Finding]:
    """The findings of a stack's measurements, client side first. `races`: the race probes run for
    suspected mismatches, keyed (front, behind) as Finding.suspected gives them."""
    if not hops:
        return []
    races = races or {}
    found: list[Finding] = []
    for front, idle, how, behind in keepalive_pairs(hops, client, client_idle_s):
        timeout = behind.keepalive_timeout_s
        if timeout is None or idle <= timeout:
            continue
        client_side = front.startswith("client")
        key = ("client" if client_side else front, behind.name)
        evidence = [f"{behind.name} closed an idle connection after {timeout:.1f} s ({behind.keepalive_how})",
                    how + f": a connection reused between {timeout:.1f} s and {idle:g} s of idleness can meet "
                          f"{behind.name}'s close (reset, EOF, or a proxy's 502)"]
        race = races.get(key)
        if race is None:
            evidence.append("race probe not run")
        elif race.failed:
            evidence.append(f"race probe reproduced it: {race.failed} of {race.pairs} requests sent to {race.target} "
                            f"about {race.gap_s:.2f} s after the previous one {race.sent()} failed "
                            f"({race.failures_text()})")
        else:
            evidence.append(f"race probe did not reproduce it: {race.pairs} of {race.pairs} requests sent to "
                            f"{race.target} about {race.gap_s:.2f} s after the previous one {race.sent()} succeeded")
        # The client's pool outliving the first hop's keep-alive is the client's setting to change;
        # one hop's pool outliving the next hop's is the stack's.
        found.append(Finding("client" if client_side else "server", behind.name, "keepalive-mismatch",
                             tuple(evidence), suspected=key))
    found += body_findings(hops, growth, horizon)
    found += context_findings(hops, growth, horizon)
    return found


def own_body_limit(hops: list[HopAudit], i: int) -> bool:
    """A hop's measured limit is its own unless the hop behind it refuses at the same size (a limit
    measured through a hop is the smallest of those behind it)."""
    limit = hops[i].max_body_bytes
    if limit is None:
        return False
    behind = hops[i + 1].max_body_bytes if i + 1 < len(hops) else None
    return behind is None or behind > limit + hops[i].body_step_bytes


# A limit a conversation will outgrow is client side, as the round it refuses is (request-too-large,
# context-exceeded): the same cause, found before it happens, keeps its side.
def body_findings(hops: list[HopAudit], growth: Growth, horizon: int) -> list[Finding]:
    found = []
    for i, hop in enumerate(hops):
        if not own_body_limit(hops, i):
            continue
        assert hop.max_body_bytes is not None
        # The earliest round that may be refused: the first past the largest body seen accepted
        # (the limit lies within one search step above it).
        at = round_reaching(hop.max_body_bytes + 1, growth.first_bytes, growth.per_round_bytes)
        if at is None or at > horizon:
            continue
        found.append(Finding("client", hop.name, "body-limit-ahead", (
            f"{hop.name} refuses request bodies above {kib(hop.max_body_bytes)} ({hop.body_how})",
            f"a conversation growing {kib(growth.per_round_bytes)} a round from {kib(growth.first_bytes)} "
            f"passes {kib(hop.max_body_bytes)} at round {at}, within the horizon of {horizon} rounds ({growth.how})")))
    return found


def context_findings(hops: list[HopAudit], growth: Growth, horizon: int) -> list[Finding]:
    found = []
    for hop in hops:
        if hop.context_tokens is None:
            continue
        chars = hop.context_tokens * CHARS_PER_TOKEN
        at = round_reaching(chars, growth.first_bytes, growth.per_round_bytes)
        if at is None or at > horizon:
            continue
        found.append(Finding("client", hop.name, "context-limit-ahead", (
            f"{hop.name}'s context is {hop.context_tokens} tokens ({hop.context_how})",
            f"a conversation growing {kib(growth.per_round_bytes)} a round from {kib(growth.first_bytes)} reaches "
            f"about {hop.context_tokens} tokens (at {CHARS_PER_TOKEN:g} characters a token) at round {at}, within "
            f"the horizon of {horizon} rounds ({growth.how})")))
    return found
