"""What a `repro watch` costs the stack it watches, at most (an upper bound from the settings),
and the lines that say it, with what is watched, when the watch starts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from repro.core.hop import Hop
from repro.session.watch_settings import WatchSettings
from repro.session.watched_stack import WatchedStack


@dataclass
class Cost:
    """What the watch sends, at most, per minute (None: unbounded, --think 0)."""

    requests_per_min: float | None
    completion_tokens_per_min: float | None
    prompt_tokens_per_min: float | None
    canary_requests_per_min: float
    scrapes_per_min: float

    def as_status(self) -> dict[str, float]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def watch_cost(*, conversations: int, rounds: int, think: float, max_tokens: int, prompt_chars: int,
               hops: int, canary_every: float, metric_hops: int, probe_interval: float, apis: int = 1) -> Cost:
    """Upper bounds from the settings: a conversation starts a round at most once per think time
    (a cycle's next conversation also waits a think time), each round generates at most
    max_tokens; its prompt is the conversation so far (user turns of prompt_chars, ~4 characters
    a token, and earlier replies), averaged over a cycle's rounds. Canaries ask for one token.
    Metrics are read every probe_interval, and once more with each canary wave (its extra sample:
    without it, 30 GETs/min were stated where 34 were sent, measured at the defaults). `apis`: the
    wire APIs canaried, each hop getting one canary of each per wave (--api chat,messages)."""
    per_min = None if think <= 0 else conversations * 60.0 / think
    mean_prompt = sum(r * prompt_chars / 4 + (r - 1) * max_tokens for r in range(1, rounds + 1)) / rounds
    canaries = hops * apis * 60.0 / canary_every if canary_every > 0 else 0.0
    return Cost(requests_per_min=per_min,
                completion_tokens_per_min=None if per_min is None else per_min * max_tokens,
                prompt_tokens_per_min=None if per_min is None else per_min * mean_prompt,
                canary_requests_per_min=canaries,
                scrapes_per_min=(metric_hops * (60.0 / probe_interval + (60.0 / canary_every if canary_every > 0
                                                                         else 0.0))
                                 if probe_interval > 0 else 0.0))


def cost_lines(cost: Cost, *, conversations: int, think: float, max_tokens: int, hops: int, canary_every: float,
               metric_hops: int, probe_interval: float, apis: int = 1, api: str = "chat") -> list[str]:
    """`api`: the conversations' wire API (their requests are that API's); `apis`: how many are canaried."""
    if cost.requests_per_min is None:
        first = (f"cost: {conversations} canary conversations with --think 0: unbounded (a round as soon as the "
                 "last ends); give --think SECONDS for a bounded cost")
    else:
        first = (f"cost: at most {cost.requests_per_min:.0f} {api} requests/min ({conversations} conversations, a "
                 f"round per {think:g} s), {cost.completion_tokens_per_min:.0f} completion tokens/min (max_tokens "
                 f"{max_tokens}), ~{cost.prompt_tokens_per_min:.0f} prompt tokens/min")
    lines = [first]
    if cost.requests_per_min is not None:
        each_api = f", {apis} APIs each" if apis > 1 else ""
        lines.append(f"      with canaries ({hops} hop{'s' if hops != 1 else ''} every {canary_every:g} s{each_api}, "
                     "1 token each): at most "
                     f"{cost.requests_per_min + cost.canary_requests_per_min:.0f} requests/min, "
                     f"{cost.completion_tokens_per_min + cost.canary_requests_per_min:.0f} completion tokens/min; "
                     "plus one canary per hop for each verdict")
    if metric_hops and cost.scrapes_per_min:
        in_all = ("" if cost.requests_per_min is None else
                  f"; {cost.requests_per_min + cost.canary_requests_per_min + cost.scrapes_per_min:.0f} requests/min "
                  "in all")
        lines.append(f"      metrics read at {metric_hops} hop{'s' if metric_hops != 1 else ''} every {probe_interval:g} s "
                     f"and with each canary wave ({cost.scrapes_per_min:.0f} GETs/min){in_all}")
    return lines


def start_lines(s: WatchSettings, stacks: list[WatchedStack], hops: list[Hop], cost: Cost, *, listen: str,
                run_dir: str, segment: str) -> list[str]:
    """What the watch says as it starts: whom it talks to, what it watches, what that costs, where
    to read it."""
    out = []
    conversations = sum(st.conversations for st in stacks)
    talked = [st for st in stacks if st.conversations]
    if talked:
        out.append(f"repro watch: {conversations} canary conversations of {s.driver.rounds} rounds, "
                   f"{s.driver.think_time:g} s apart, to " + ", ".join(f"{st.name} ({st.target})" for st in talked))
    else:
        out.append(f"repro watch: no engine found yet; {s.per_engine} canary conversation of {s.driver.rounds} "
                   f"rounds, {s.driver.think_time:g} s apart, to each engine discovered (asked every "
                   f"{s.discover_every:g} s)")
    if hops:
        out.append("watching: " + ", ".join(f"{h.name} {h.url}" + ("" if h.canary else " (read only)") for h in hops))
    lines = cost_lines(cost, conversations=conversations or s.per_engine, think=s.driver.think_time,
                       max_tokens=s.driver.max_tokens, hops=sum(1 for h in hops if h.canary) or 1,
                       canary_every=s.canary_every, apis=1 + len(s.canary_apis), api=s.driver.api,
                       metric_hops=sum(1 for h in hops if h.metrics_url), probe_interval=s.probe_interval)
    if not talked:
        lines[0] = lines[0].replace("cost:", "cost for each engine:", 1)
    out += lines
    out.append(f"metrics: http://{listen}/metrics   status: http://{listen}/")
    out.append(f"log: {run_dir}/")
    out.append(f"      segments {segment}, ...")
    out.append("stop with Ctrl-C or SIGTERM")
    return out


def stacks_cost(s: WatchSettings, stacks: list[WatchedStack], hops: list[Hop]) -> Cost:
    """The watch's cost with the stacks as they are now (with none yet: one discovered engine's)."""
    conversations = sum(st.conversations for st in stacks) or s.per_engine
    return watch_cost(conversations=conversations, rounds=s.driver.rounds, think=s.driver.think_time,
                      max_tokens=s.driver.max_tokens, prompt_chars=s.prompts.prompt_chars,
                      hops=sum(1 for h in hops if h.canary) or 1,
                      canary_every=s.canary_every, metric_hops=sum(1 for h in hops if h.metrics_url),
                      probe_interval=s.probe_interval, apis=1 + len(s.canary_apis))
