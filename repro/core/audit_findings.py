"""`repro audit`'s judgement: what was measured on each hop in (audit_measurements), findings
and notes out. Pure (no I/O).

A finding is a hang or failure that a healthy stack will have later, read from its settings:
- keepalive-mismatch: a side keeps idle connections to the hop behind it longer than that hop
  keeps them open, so a reused connection can meet the hop's close (a reset, an EOF, a proxy's
  502): sglang#20851 (smg's 50 s pool over SGLang's 5 s), NVIDIA/srt-slurm#283 (nginx's 75 s).
- body-limit-ahead: a hop refuses request bodies above a size the conversation's history reaches
  within the horizon.
- context-limit-ahead: the engine's context is reached within the horizon.
- cancel-leak: a hop still counts a streamed request a deadline after its client closed the
  connection (sglang#36333's num_running_reqs stuck for hours, vLLM's running gauge counting aborted
  requests): capacity lost, and an engine that looks busy while idle poisons every later diagnosis.
- idle-stream-cut: a hop cuts a stream that sends no byte for less than a long context's time to
  first token (nginx proxy_read_timeout, HAProxy timeout server, Envoy and ALB idle timeouts: litellm#34819).
A limit alone is no finding: only one the projected growth reaches within `horizon` rounds.
An assumed value is no finding either: a keep-alive mismatch resting on a hop's upstream pool that
nobody read (taken as the client's) and that the race probe did not reproduce is a Note, naming the
setting to read; it never sets the exit code. Every finding carries its next action (audit_actions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from repro.core.audit_actions import (
    AuditAction,
    body_limit_action,
    cancel_action,
    client_pool_action,
    context_action,
    idle_stream_action,
    software_of,
    upstream_pool_action,
    upstream_pool_check,
)
from repro.core.audit_measurements import (
    CHARS_PER_TOKEN,
    CancelRun,
    Growth,
    HopAudit,
    IdleStreamRun,
    RaceOutcome,
    kib,
)
from repro.core.kinds import Side

AuditKind = Literal["keepalive-mismatch", "body-limit-ahead", "context-limit-ahead", "cancel-leak", "idle-stream-cut"]


@dataclass(frozen=True)
class Finding:
    side: Side
    where: str
    kind: AuditKind
    evidence: tuple[str, ...]
    suspected: tuple[str, str] | None = field(default=None, compare=False)  # (front, behind) for a race probe
    next_action: AuditAction | None = field(default=None, compare=False)

    def to_dict(self) -> dict:
        return {"side": self.side, "where": self.where, "kind": self.kind, "evidence": list(self.evidence),
                "next_action": self.next_action.to_dict() if self.next_action else None}


@dataclass(frozen=True)
class Note:
    """A mismatch that rests on an assumed value and was not reproduced: a setting to read, not a
    finding (no side, no exit code). `assumed`: the hop whose upstream pool was taken as the client's."""

    where: str  # the hop whose keep-alive the assumed pool was compared with
    kind: AuditKind
    assumed: str
    evidence: tuple[str, ...]
    check: AuditAction  # do: the setting to read; confirm: the audit to run with it

    def to_dict(self) -> dict:
        return {"where": self.where, "kind": self.kind, "assumed": self.assumed, "evidence": list(self.evidence),
                "check": self.check.do, "confirm": self.check.confirm}


@dataclass(frozen=True)
class Mismatch:
    """A side that keeps idle connections to `behind` longer than `behind` keeps them open."""

    front: str  # "client" or the front hop's name
    front_software: str | None  # what the front hop runs, from its own Server header
    behind: HopAudit
    idle_s: float  # how long the front side keeps them
    idle_how: str
    assumed: bool  # idle_s is the client's, taken for a hop's upstream pool nobody read

    @property
    def key(self) -> tuple[str, str]:
        return self.front, self.behind.name


def round_reaching(limit: float, first: float, per_round: float) -> int | None:
    """The first round (1-based) whose request reaches `limit`, growing `per_round` from `first`; None: never."""
    if first >= limit:
        return 1
    if per_round <= 0:
        return None
    return 1 + math.ceil((limit - first) / per_round)


def own_software(hops: list[HopAudit], i: int) -> str | None:
    """What hop i runs, from its Server header; None when that header is the hop behind's passed on
    (HAProxy sends none of its own) or absent."""
    server = hops[i].server
    if i + 1 < len(hops) and hops[i + 1].server == server:
        return None
    return software_of(server)


def keepalive_mismatches(hops: list[HopAudit], client: str, client_idle_s: float) -> list[Mismatch]:
    """Each side that keeps idle connections to a hop longer than that hop keeps them open: the
    client in front of the first hop, each hop in front of the next (its own pool when given, else
    the client's, assumed: a hop's pool is not measurable from outside)."""
    if not hops:
        return []
    sides = [Mismatch("client", None, hops[0], client_idle_s,
                      f"{client}'s pool keeps idle connections {client_idle_s:g} s", assumed=False)]
    for i, (front, behind) in enumerate(zip(hops, hops[1:], strict=False)):
        software = own_software(hops, i)
        if front.upstream_keepalive_s is not None:
            sides.append(Mismatch(front.name, software, behind, front.upstream_keepalive_s,
                                  f"{front.name} pools idle upstream connections {front.upstream_keepalive_s:g} s "
                                  f"({front.upstream_how})", assumed=False))
        else:
            sides.append(Mismatch(front.name, software, behind, client_idle_s,
                                  f"{front.name}'s upstream pool is not measurable from outside: taken as the "
                                  f"client's ({client}: {client_idle_s:g} s)", assumed=True))
    return [m for m in sides if m.behind.keepalive_timeout_s is not None and m.idle_s > m.behind.keepalive_timeout_s]


def mismatch_evidence(m: Mismatch, race: RaceOutcome | None) -> tuple[str, ...]:
    timeout = m.behind.keepalive_timeout_s
    name = m.behind.name
    evidence = [f"{name} closed an idle connection after {timeout:.1f} s ({m.behind.keepalive_how})",
                m.idle_how + f": a connection reused between {timeout:.1f} s and {m.idle_s:g} s of idleness can "
                             f"meet {name}'s close (reset, EOF, or a proxy's 502)"]
    if race is None:
        evidence.append("race probe not run")
    elif race.failed:
        evidence.append(f"race probe reproduced it: {race.failed} of {race.pairs} requests sent to {race.target} "
                        f"about {race.gap_s:.2f} s after the previous one {race.sent()} failed "
                        f"({race.failures_text()})")
    else:
        evidence.append(f"race probe did not reproduce it: {race.pairs} of {race.pairs} requests sent to "
                        f"{race.target} about {race.gap_s:.2f} s after the previous one {race.sent()} succeeded")
    return tuple(evidence)


def reproduced(m: Mismatch, races: dict[tuple[str, str], RaceOutcome]) -> bool:
    race = races.get(m.key)
    return race is not None and race.failed > 0


def audit_findings(hops: list[HopAudit], *, client: str, client_idle_s: float, growth: Growth, horizon: int,
                   races: dict[tuple[str, str], RaceOutcome] | None = None) -> list[Finding]:
    """The findings of a stack's measurements, client side first. `races`: the race probes run for
    the mismatches (keepalive_mismatches), keyed (front, behind) as Mismatch.key gives them. A
    mismatch resting on an assumed pool is a finding only when its race probe reproduced it."""
    races = races or {}
    found: list[Finding] = []
    for m in keepalive_mismatches(hops, client, client_idle_s):
        if m.assumed and not reproduced(m, races):
            continue  # a note to check (audit_notes), not a finding
        timeout = m.behind.keepalive_timeout_s
        assert timeout is not None
        # The client's pool outliving the first hop's keep-alive is the client's setting to change;
        # one hop's pool outliving the next hop's is the stack's.
        if m.front == "client":
            action = client_pool_action(client, m.behind.name, timeout, m.idle_s)
        else:
            action = upstream_pool_action(m.front, m.front_software, m.behind.name, timeout, m.idle_s)
        found.append(Finding("client" if m.front == "client" else "server", m.behind.name, "keepalive-mismatch",
                             mismatch_evidence(m, races.get(m.key)), suspected=m.key, next_action=action))
    found += body_findings(hops, growth, horizon)
    found += context_findings(hops, growth, horizon)
    return found


def audit_notes(hops: list[HopAudit], *, client: str, client_idle_s: float,
                races: dict[tuple[str, str], RaceOutcome] | None = None) -> list[Note]:
    """The mismatches resting on an assumed upstream pool that no race probe reproduced: each a
    setting to read (and the audit to run with it), never a finding."""
    races = races or {}
    return [Note(m.behind.name, "keepalive-mismatch", m.front, mismatch_evidence(m, races.get(m.key)),
                 upstream_pool_check(m.front, m.front_software, m.behind.name))
            for m in keepalive_mismatches(hops, client, client_idle_s) if m.assumed and not reproduced(m, races)]


def horizon_bytes(growth: Growth, horizon: int) -> int:
    """The size of the request the conversation sends at round `horizon`."""
    return growth.first_bytes + (horizon - 1) * growth.per_round_bytes


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
        if hop.body_refuses_all:
            if i + 1 < len(hops) and hops[i + 1].body_refuses_all:
                continue  # seen through this hop: the hop behind refuses them
            need = horizon_bytes(growth, horizon)
            found.append(Finding("client", hop.name, "body-limit-ahead", (
                f"{hop.name} {hop.body_how}",
                f"every request is refused, from round 1 (a conversation's first request is {kib(growth.first_bytes)})"),
                next_action=body_limit_action(hop.name, own_software(hops, i), need, kib(need), horizon)))
            continue
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
            f"passes {kib(hop.max_body_bytes)} at round {at}, within the horizon of {horizon} rounds ({growth.how})"),
            next_action=body_limit_action(hop.name, own_software(hops, i), horizon_bytes(growth, horizon),
                                          kib(horizon_bytes(growth, horizon)), horizon)))
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
            f"the horizon of {horizon} rounds ({growth.how})"),
            next_action=context_action(hop.name, at, math.ceil(horizon_bytes(growth, horizon) / CHARS_PER_TOKEN),
                                       horizon)))
    return found


def cancel_findings(runs: list[CancelRun]) -> list[Finding]:
    """A cancel-leak where a hop kept a cancelled stream past the deadline. In each run the frontmost
    hop that kept it is the suspect; but when that hop released it in the run cancelled at itself, it
    was never told: the leak is the hop in front of it, which did not pass the close on."""
    own = {run.entry: {r.hop: r for r in run.releases}.get(run.entry) for run in runs if not run.why}
    evidence: dict[str, list[str]] = {}
    actions: dict[str, AuditAction] = {}
    for run in runs:
        if run.why:
            continue
        keepers = [r for r in run.releases if r.kept]
        if not keepers:
            continue
        keeper = keepers[0]
        order = [r.hop for r in run.releases]
        where, why = keeper.hop, f"{keeper.hop} kept it"
        alone = own.get(keeper.hop)
        if keeper.hop != run.entry and alone is not None and alone.released_s is not None:
            where = order[order.index(keeper.hop) - 1]
            why = (f"{keeper.hop} released a stream cancelled at itself in {alone.released_s:.1f} s: {where} did not "
                   f"pass the close on")
        actions.setdefault(where, cancel_action(where, where != keeper.hop, run.deadline_s))
        lines = evidence.setdefault(where, [])
        lines.append(f"a stream sent to {run.entry} closed after {run.events} events: {why}")
        lines += [r.text(run.deadline_s) for r in run.releases]
    return [Finding("server", where, "cancel-leak", tuple(lines), next_action=actions[where])
            for where, lines in evidence.items()]


# Two runs cut within this of each other were cut by the same timer (the hop behind's).
SAME_CUT_S = 0.5


def idle_stream_findings(runs: list[IdleStreamRun], budget_s: float,
                         software: dict[str, str | None] | None = None) -> list[Finding]:
    """An idle-stream-cut at the hop that cut a stream idle for less than `budget_s` (a long context's
    time to first token): a run cut while the run sent to the hop behind it was not (or cut later).
    `software`: what each hop runs (own_software), for the setting its next action names."""
    software = software or {}
    found = []
    measured = [run for run in runs if not run.why]
    for i, run in enumerate(measured):
        if run.cut_s is None or run.cut_s >= budget_s:
            continue
        behind = measured[i + 1] if i + 1 < len(measured) else None
        if behind is not None and behind.cut_s is not None and behind.cut_s <= run.cut_s + SAME_CUT_S:
            continue  # the hop behind cut it as soon: its finding, not this one's
        lines = [f"a stream sent to {run.entry} whose first token came after {run.delay_s:g} s was cut after "
                 f"{run.cut_s:.1f} s ({run.how}), below the time to first token budget of {budget_s:g} s"]
        if behind is not None:
            held = (f"its first event came after {behind.first_token_s:.1f} s" if behind.first_token_s is not None
                    else f"cut after {behind.cut_s:.1f} s ({behind.how})")
            lines.append(f"the same stream sent to {behind.entry}, behind it: {held}")
        found.append(Finding("server", run.entry, "idle-stream-cut", tuple(lines),
                             next_action=idle_stream_action(run.entry, software.get(run.entry), budget_s)))
    return found


