"""`repro audit`'s session: the measurements of every hop (bounded, in the order that keeps one
from perturbing another), the race probes for the keep-alive mismatches found, and the findings
and notes judged from them, with the load and time it may take, known before anything is sent.

    load = planned_load(hops, settings)      # printed before it starts
    outcome = audit_stack(hops, settings, growth)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from probes.hop_measurements import (
    CONTEXT_PROBE_MAX,
    CONTEXT_PROBE_TOKENS,
    IDLE_MARGIN_S,
    RACE_SPREAD_S,
    SCRAPE_TIMEOUT_S,
    BodyLimit,
    Context,
    body_probe_count,
    is_simulated_engine,
    measure_body_limit,
    measure_cancel,
    measure_context,
    measure_idle_stream,
    measure_keepalive,
    race_probe,
)
from repro.core.audit_findings import (
    Finding,
    Mismatch,
    Note,
    audit_findings,
    audit_notes,
    cancel_findings,
    idle_stream_findings,
    keepalive_mismatches,
    own_software,
)
from repro.core.audit_measurements import (
    CHARS_PER_TOKEN,
    BodySeen,
    CancelRun,
    CancelSeen,
    Growth,
    HopAudit,
    IdleStreamRun,
    IdleStreamSeen,
    KeepAliveSeen,
    RaceOutcome,
    Release,
    TimeBound,
)
from repro.core.hop import Hop
from repro.core.wire_api import WIRE_APIS, Api
from repro.io.tls import client_context

RACE_PAIRS = 8
REQUEST_TIMEOUT_S = 10.0
CLIENT_RACE_PAST_S = 0.05
CANCEL_EVENTS = 3  # SSE events read before the cancelled stream's connection is closed
CANCEL_POLL_S = 0.25  # how often the gauges are read after the close: the release time's resolution


@dataclass(frozen=True)
class AuditSettings:
    """What the audit measures and how (the defaults are `repro audit`'s)."""

    model: str = ""
    api_key: str | None = None
    client: str = "aiohttp"
    client_idle_s: float = 15.0
    upstream: dict[str, float] = field(default_factory=dict)  # hop -> its upstream pool's idle time, as given
    keepalive_limit: float = 75.0
    request_timeout: float = REQUEST_TIMEOUT_S
    body_cap: int = 4 * 1048576
    body_step: int = 4096
    horizon: int = 200
    no_race: bool = False
    cancel_deadline: float = 10.0
    cancel_max_tokens: int = 256
    no_cancel: bool = False
    ttft_budget: float = 60.0
    no_idle_stream: bool = False
    api: Api = "chat"  # the wire API every measuring request speaks: its path, shape and auth headers

    def headers(self) -> dict[str, str]:
        return WIRE_APIS[self.api].headers(self.api_key)


@dataclass(frozen=True)
class AuditOutcome:
    """What the audit measured and judged: the findings set the exit status, the notes never do."""

    audits: list[HopAudit]
    costs: dict
    cancels: list[CancelRun]
    idles: list[IdleStreamRun]
    findings: list[Finding]
    notes: list[Note]
    unmeasured: list[str]  # measurements that failed: exit 12 when nothing else decides it
    not_measurable: list[str]  # what this stack cannot give: listed, the exit unchanged

    def to_dict(self, settings: AuditSettings, growth: Growth, load: Load) -> dict:
        return {"hops": [a.to_dict() for a in self.audits], "unmeasured": self.unmeasured,
                "not_measurable": self.not_measurable, "api": settings.api, "client": settings.client,
                "client_idle_s": settings.client_idle_s,
                "growth": {"first_bytes": growth.first_bytes, "per_round_bytes": growth.per_round_bytes,
                           "how": growth.how},
                "horizon": settings.horizon, "ttft_budget_s": settings.ttft_budget,
                "time_bound_s": load.time.seconds, "cancel_runs": [r.to_dict() for r in self.cancels],
                "idle_stream_runs": [r.to_dict() for r in self.idles], "costs": self.costs,
                "findings": [f.to_dict() for f in self.findings], "notes": [n.to_dict() for n in self.notes]}


def audit_stack(hops: list[Hop], settings: AuditSettings, growth: Growth) -> AuditOutcome:
    """Measure, race the keep-alive mismatches found, judge once."""
    audits, costs, cancels, idles, cannot = anyio.run(measure, hops, settings)
    mismatches = keepalive_mismatches(audits, settings.client, settings.client_idle_s)
    races = {} if settings.no_race else anyio.run(run_races, hops, audits, mismatches, settings, costs)
    findings = audit_findings(audits, client=settings.client, client_idle_s=settings.client_idle_s, growth=growth,
                              horizon=settings.horizon, races=races)
    software = {a.name: own_software(audits, i) for i, a in enumerate(audits)}
    findings += cancel_findings(cancels) + idle_stream_findings(idles, settings.ttft_budget, software)
    # A mismatch resting on an assumed pool, not reproduced: a setting to read, never a finding nor the exit.
    notes = audit_notes(audits, client=settings.client, client_idle_s=settings.client_idle_s, races=races)
    failed, not_measurable = unmeasured_of(audits, cancels, idles, cannot)
    return AuditOutcome(audits, costs, cancels, idles, findings, notes, failed, not_measurable)


@dataclass(frozen=True)
class Load:
    requests: int
    detail: str
    upload: int
    time: TimeBound


def planned_load(hops: list[Hop], settings: AuditSettings) -> Load:
    """The most the audit sends and how long it can take (printed before it starts), from the
    deadlines of what will run (measure, run_races): each exchange, its connect included, within
    --request-timeout; each hop's body search and context probe within one --request-timeout."""

    n, timeout = len(hops), settings.request_timeout
    bodies = n * body_probe_count(settings.body_cap, settings.body_step)
    engines = sum(hop.role == "engine" for hop in hops)
    context = engines * (3 + CONTEXT_PROBE_MAX)
    races = 0 if settings.no_race else n * RACE_PAIRS * 2
    # Each cancel run: the stream, and every hop behind its entry read before, during, then every poll.
    polls = int(settings.cancel_deadline / CANCEL_POLL_S) + 3
    cancels = 0 if settings.no_cancel else sum(1 + (n - i) * polls for i in range(n))
    idles = 0 if settings.no_idle_stream else n + engines
    keepalive = n
    detail = (f"{keepalive} keep-alive, {bodies} body search, {context} context, {cancels} cancel "
              f"(1 stream of max_tokens={settings.cancel_max_tokens} per hop, the rest metrics reads), {idles} "
              f"idle-stream, {races} race; chats are max_tokens=1 unless said")
    steps = [("body and context", n * timeout)]
    if not settings.no_cancel:
        # a run: the gauges read (at once) before, the stream under way, read while it streams, then
        # polled until the deadline, the last read started before it
        steps.append(("cancel", n * (3 * SCRAPE_TIMEOUT_S + timeout + settings.cancel_deadline)))
    if not settings.no_idle_stream:
        # at once; whether the engine is the simulated one was asked alongside the keep-alive waits
        steps.append(("idle streams", settings.ttft_budget + IDLE_MARGIN_S))
    # a pair: the first exchange, the gap (a measured keep-alive timeout, at most the limit, and the
    # client's margin and spread on it), the second exchange
    race_s = 0.0 if settings.no_race else (2 * timeout + settings.keepalive_limit + CLIENT_RACE_PAST_S
                                        + (RACE_PAIRS - 1) / 2 * RACE_SPREAD_S)
    time_bound = TimeBound(settings.keepalive_limit + timeout, tuple(steps), round(race_s, 2))
    return Load(keepalive + bodies + context + cancels + idles + races, detail, n * settings.body_cap * 2
                + engines * int(CHARS_PER_TOKEN) * sum(CONTEXT_PROBE_TOKENS), time_bound)


def unmeasured_of(audits: list[HopAudit], cancels: list[CancelRun], idles: list[IdleStreamRun],
                  notes: list[str]) -> tuple[list[str], list[str]]:
    """Each measurement not taken, as "hop: what: why": those that failed (no answer, no connection, a
    gauge that did not count the stream: exit 12), and those this stack cannot give (a hop with no
    metrics page, an engine that cannot hold a first token back: listed, the exit unchanged)."""
    failed = [f"{a.name}: {what}: {how.removeprefix('not measured: ')}" for a in audits
              for what, how, measured in (("keep-alive", a.keepalive_how, a.keepalive_seen is not KeepAliveSeen.NOT_MEASURED),
                                          ("body limit", a.body_how, a.body_seen is not BodySeen.NOT_MEASURED))
              if not measured]
    cannot = list(notes)
    for run in cancels:
        if run.why:
            failed.append(f"{run.entry}: cancel: {run.why}")
        for release in run.releases:
            if not release.measured:
                line = f"{release.hop}: cancel (stream sent to {run.entry}): {release.why}"
                (failed if release.unread is None or release.unread.measurable else cannot).append(line)
    for idle in idles:
        if idle.why:
            failed.append(f"{idle.entry}: idle stream: {idle.why}")
    return failed, cannot


async def measure(hops: list[Hop], settings: AuditSettings
                  ) -> tuple[list[HopAudit], dict, list[CancelRun], list[IdleStreamRun], list[str]]:
    """Every hop's keep-alive wait in parallel (it dominates); alongside, one thing at a time so that
    none perturbs another's gauges: the body searches and the engines' context, the cancel runs, then
    the idle-stream runs (in parallel with each other)."""

    tls = client_context()
    timeout, model, upstream = settings.request_timeout, settings.model, settings.upstream
    headers = settings.headers()
    keepalives, bodies, contexts, costs = {}, {}, {}, {}
    cancels: list[CancelRun] = []
    idles: list[IdleStreamRun] = []
    notes: list[str] = []
    clock = anyio.current_time

    def spent(hop: str, what: str, start: float, requests: int) -> None:
        costs.setdefault(hop, {})[what] = {"seconds": round(clock() - start, 2), "requests": requests}

    async def keepalive(hop: Hop) -> None:
        start = clock()
        keepalives[hop.name] = await measure_keepalive(hop.url, limit=settings.keepalive_limit, headers=headers,
                                                       timeout=timeout, tls=tls)
        spent(hop.name, "keepalive", start, keepalives[hop.name].requests)

    async def one_at_a_time() -> None:
        for hop in hops:
            # The hop's body search and context probe share one --request-timeout: the time bound's share.
            with anyio.move_on_after(timeout):
                start = clock()
                bodies[hop.name] = await measure_body_limit(hop.url, model, cap=settings.body_cap, step=settings.body_step,
                                                            headers=headers, timeout=timeout, tls=tls,
                                                            api=settings.api)
                spent(hop.name, "body", start, bodies[hop.name].requests)
                if hop.role == "engine":
                    start = clock()
                    contexts[hop.name] = await measure_context(hop.url, model, headers=headers, timeout=timeout,
                                                               tls=tls, api=settings.api)
                    spent(hop.name, "context", start, contexts[hop.name].requests)
            unfinished = f"not measured: unfinished when its {timeout:g} s (--request-timeout) ran out"
            bodies.setdefault(hop.name, BodyLimit(None, unfinished, 0))
            if hop.role == "engine":
                contexts.setdefault(hop.name, Context(None, unfinished, 0))
        if not settings.no_cancel:
            await cancel_runs(hops, model, settings, headers, tls, cancels, spent)
        if not settings.no_idle_stream:
            await simulated.wait()
            await idle_stream_runs(hops, model, settings, headers, tls, idles, notes, spent, is_sim[0])

    # Whether the engine is repro's simulated engine (the idle streams need it), asked alongside the
    # keep-alive waits: one exchange, within their time.
    simulated, is_sim = anyio.Event(), [False]

    async def ask_simulated() -> None:
        if not settings.no_idle_stream and hops[-1].role == "engine":
            is_sim[0] = await is_simulated_engine(hops[-1].url, headers=headers, timeout=timeout, tls=tls)
        simulated.set()

    async with anyio.create_task_group() as tg:
        for hop in hops:
            tg.start_soon(keepalive, hop)
        tg.start_soon(ask_simulated)
        tg.start_soon(one_at_a_time)
    first_run = {r.hop: r for r in cancels[0].releases} if cancels and not cancels[0].why else {}
    idle_of = {run.entry: run for run in idles}
    audits = []
    for hop in hops:
        ka, body, ctx = keepalives[hop.name], bodies[hop.name], contexts.get(hop.name)
        release, idle = first_run.get(hop.name), idle_of.get(hop.name)
        audits.append(HopAudit(
            name=hop.name, role=hop.role, keepalive_timeout_s=ka.timeout_s, keepalive_limit_s=settings.keepalive_limit,
            keepalive_how=ka.how, max_body_bytes=body.max_bytes, body_cap_bytes=settings.body_cap,
            body_step_bytes=settings.body_step, body_how=body.how, body_refuses_all=body.refuses_all,
            context_tokens=ctx.tokens if ctx else None, context_how=ctx.how if ctx else "not an engine",
            upstream_keepalive_s=upstream.get(hop.name),
            upstream_how="--upstream-keepalive" if hop.name in upstream else "", server=ka.server,
            cancel_release_s=release.released_s if release else None,
            cancel_how=(f"stream sent to {cancels[0].entry}: " + release.text(settings.cancel_deadline) if release
                        else "not measured" if settings.no_cancel or not cancels else f"not measured: {cancels[0].why}"),
            idle_stream_cut_s=idle.cut_s if idle else None,
            idle_stream_how=idle_text(idle) if idle else "not measured", keepalive_seen=ka.seen, body_seen=body.seen,
            cancel_seen=cancel_seen(release), idle_stream_seen=idle.seen if idle else IdleStreamSeen.NOT_MEASURED))
    return audits, costs, cancels, idles, notes


def cancel_seen(release: Release | None) -> CancelSeen:
    if release is None or not release.measured:
        return CancelSeen.NOT_MEASURED
    return CancelSeen.KEPT if release.kept else CancelSeen.RELEASED


def idle_text(run: IdleStreamRun) -> str:
    if run.why:
        return f"not measured: {run.why}"
    if run.cut_s is not None:
        return f"first token held back {run.delay_s:g} s: cut after {run.cut_s:.1f} s ({run.how})"
    return f"first token held back {run.delay_s:g} s: not cut, its first event came after {run.first_token_s:.1f} s"


async def cancel_runs(hops: list[Hop], model: str, settings: AuditSettings, headers: dict[str, str], tls,
                      runs: list[CancelRun], spent) -> None:
    """A stream cancelled at each hop in turn, client side first, each watched on its hop and every
    hop behind it; one at a time, so that each reads only its own stream in the gauges."""

    for i, entry in enumerate(hops):
        start = anyio.current_time()
        cost = await measure_cancel(entry, hops[i:], model, max_tokens=settings.cancel_max_tokens, events=CANCEL_EVENTS,
                                    deadline=settings.cancel_deadline, poll=CANCEL_POLL_S, headers=headers,
                                    timeout=settings.request_timeout, tls=tls, api=settings.api)
        runs.append(cost.run)
        spent(entry.name, "cancel", start, cost.requests)


async def idle_stream_runs(hops: list[Hop], model: str, settings: AuditSettings, headers: dict[str, str], tls,
                           runs: list[IdleStreamRun], notes: list[str], spent, simulated: bool) -> None:
    """When the engine is repro's simulated engine, a stream whose first token it holds back
    --ttft-budget seconds sent to each hop at once; else not measurable (said in `notes`)."""

    engine = hops[-1]
    if engine.role != "engine":
        notes.append("idle stream: no engine hop given last: the first token can only be held back by repro's "
                     "simulated engine, put behind the same hop configuration")
        return
    if not simulated:
        notes.append(f"idle stream: {engine.name} is not repro's simulated engine, which alone can hold a first "
                     "token back on request: run the same hop configuration in front of `repro sim` to measure it")
        return
    found: dict[str, IdleStreamRun] = {}

    async def one(hop: Hop) -> None:
        start = anyio.current_time()
        found[hop.name] = await measure_idle_stream(hop, model, delay=settings.ttft_budget, headers=headers,
                                                    timeout=settings.request_timeout, tls=tls, api=settings.api)
        spent(hop.name, "idle stream", start, 1)

    async with anyio.create_task_group() as tg:
        for hop in hops:
            tg.start_soon(one, hop)
    runs += [found[hop.name] for hop in hops]


async def run_races(hops: list[Hop], audits: list[HopAudit], mismatches: list[Mismatch], settings: AuditSettings,
                    costs: dict) -> dict[tuple[str, str], RaceOutcome]:
    """A race probe for each keep-alive mismatch, in parallel: pairs sent to the side that reuses
    (the first hop for the client's pool), the gap the closing hop's measured timeout."""

    tls = client_context()
    model, timeout, headers = settings.model, settings.request_timeout, settings.headers()
    by_name = {hop.name: hop for hop in hops}
    timeouts = {a.name: a.keepalive_timeout_s for a in audits}
    outcomes: dict[tuple[str, str], RaceOutcome] = {}

    async def one(key: tuple[str, str]) -> None:
        front, behind = key
        target = hops[0] if front == "client" else by_name[front]
        gap = timeouts[behind]
        assert gap is not None
        if front == "client":
            # The client's own connection: any reuse past the hop's close fails, so the pairs go just
            # past it, clear of the jitter in when we saw the answer end (it shortens the timeout measured).
            gap += CLIENT_RACE_PAST_S
        start = anyio.current_time()
        race = await race_probe(target.url, model, gap_s=gap, pairs=RACE_PAIRS, headers=headers,
                                timeout=timeout, tls=tls, same_connection=front == "client", api=settings.api)
        outcomes[key] = RaceOutcome(target.name, gap, RACE_PAIRS, len(race.failures), race.failures,
                                    same_connection=front == "client")
        costs.setdefault(behind, {})[f"race {front}->{behind}"] = {"seconds": round(anyio.current_time() - start, 2),
                                                                   "requests": race.requests}

    async with anyio.create_task_group() as tg:
        for mismatch in mismatches:
            tg.start_soon(one, mismatch.key)
    return outcomes
