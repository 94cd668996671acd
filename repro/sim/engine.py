"""The simulated engine's scheduler: one step loop, a batch of running requests, a FIFO queue.

Like SGLang's and vLLM's schedulers, time advances in decode steps: every step (`itl` seconds, or
longer for a bigger batch: `decode_step_seconds`) each running request whose prefill is done gets one token. One timer per step (not one per request)
keeps the engine cheap at a thousand streams. No I/O here: the HTTP front end (app.py) submits
requests and waits on each request's `wake` event.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from repro.core.faultspec import FaultSpec
from repro.sim.config import SimConfig, armed_sim_fault

# Histogram buckets in the spirit of SGLang's inter-token-latency histogram (seconds).
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
               0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0)


def decode_step_seconds(config: SimConfig, batch: int) -> float:
    """How long one decode step of `batch` running requests takes.

    A real engine's step grows with the batch: a fixed part (weights read once per step), a part per
    request (its KV cache read), and a jump every `wave_size` requests (GPU kernels run in waves of
    thread blocks: one request past a full wave costs a whole extra wave). Every coefficient defaults
    to 0, which leaves the flat `itl` the sim always had.

    The knob is SGLang's `--cuda-graph-max-bs`: SGLang captures CUDA graphs for decode batches up to
    that size and runs larger batches eagerly, paying the kernel-launch overhead on every step
    (`no_graph_slowdown`). A setting whose effect depends on the batch size, so raising it helps at
    the concurrencies between the old and the new value and nowhere else: the incident's
    "+12.8% at 64, flat at 48". Unset (None) means every batch runs graphed.
    """
    step = config.itl + config.itl_per_request * batch
    if config.wave_size > 0 and batch > 0:
        step += config.wave_step * math.ceil(batch / config.wave_size)
    if config.cuda_graph_max_bs is not None and batch > config.cuda_graph_max_bs:
        step *= config.no_graph_slowdown
    return step


class Request:
    """One generation, as the scheduler sees it."""

    __slots__ = ("rid", "prompt_tokens", "max_tokens", "seed", "produced", "finished", "finish_reason",
                 "aborted", "wake", "arrived", "ready_at", "first_token_at", "streaming", "first_token_delay",
                 "stop_after")

    def __init__(self, rid: str, prompt_tokens: int, max_tokens: int, seed: int, arrived: float,
                 streaming: bool = False, first_token_delay: float = 0.0, stop_after: int = 0) -> None:
        self.rid = rid
        # The model's own end of the reply (its EOS): finish "stop" after this many tokens (0: none,
        # it writes until max_tokens).
        self.stop_after = stop_after
        self.first_token_delay = first_token_delay  # a longer prefill asked for this request alone
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.seed = seed
        self.streaming = streaming
        self.produced = 0
        self.finished = False
        self.finish_reason: str | None = None
        self.aborted = False
        self.wake = asyncio.Event()
        self.arrived = arrived
        self.ready_at = 0.0
        self.first_token_at: float | None = None


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int]
    total: float = 0.0
    count: int = 0

    @classmethod
    def of(cls, buckets: tuple[float, ...]) -> Histogram:
        return cls(buckets, [0] * (len(buckets) + 1))

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += times
        self.total += value * times
        self.count += times


class Engine:
    def __init__(self, config: SimConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.quirks = config.active_quirks
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.parked: set[asyncio.Event] = set()  # lost / no-transfer requests, released on disarm or close
        self.closed = False
        self._work = asyncio.Event()
        # Fault state: counted from the moment the fault was armed.
        self.fault: FaultSpec | None = armed_sim_fault(config.fault)
        self._fault_armed_at = clock()
        self._requests_since_armed = 0
        self.requests_seen = 0
        # What the metrics report. Counters are plain numbers read by the collector at scrape time.
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0     # vLLM: per step; SGLang: at request finish (its quirk)
        # SGLang's finish-time counters, split by is_streaming as its tokenizer labels them
        # (observe_one_finished_request in srt/observability/metrics_collector.py).
        self.sglang_generation_tokens = {False: 0, True: 0}
        self.sglang_prompt_tokens = {False: 0, True: 0}
        self.sglang_requests = {False: 0, True: 0}
        # SGLang's realtime_tokens_total by mode: prefill tokens when a prefill batch runs, decode
        # tokens on every decode step (metrics_reporter.py report_prefill_stats / report_decode_stats).
        self.realtime_tokens: dict[str, int] = {"prefill_compute": 0, "decode": 0}
        self.requests_finished = 0
        self.finished_by_reason: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.itl = Histogram.of(ITL_BUCKETS)
        self.ttft = Histogram.of(TTFT_BUCKETS)  # every request (vLLM's series has no stream label)
        self.ttft_by_stream = {False: Histogram.of(TTFT_BUCKETS), True: Histogram.of(TTFT_BUCKETS)}
        # SGLang 0.5.23 never observes TTFT on a PD prefill worker, nor ITL for its one token
        # (collect_metrics in python/sglang/srt/managers/tokenizer_manager.py): both stay empty there.
        self.observes_latency = not (config.dialect == "sglang" and config.role == "prefill"
                                     and config.current_release)
        self.decode_steps = 0
        self.aborted_stuck = 0  # vLLM quirk: aborted requests still counted as running
        self.published = (0, 0)  # (running, queued) as SGLang's scheduler last wrote them
        self.idle_since: float | None = clock()
        self.last_step_at: float | None = None
        # When the step being slept through ends: steps are paced by deadline (see run()).
        self.step_deadline: float | None = None

    # --- faults -----------------------------------------------------------------------------

    def arm(self, spec: str | None) -> None:
        """Arm a fault now (None or `none` disarms); `after=N` counts requests from this moment."""
        self.fault = armed_sim_fault(spec)
        self._fault_armed_at = self.clock()
        self._requests_since_armed = 0
        if self.fault is None or self.fault.name not in ("lose", "no-transfer"):
            self.release_parked()
        self._work.set()

    def fault_active(self, name: str) -> bool:
        fault = self.fault
        if fault is None or fault.name != name:
            return False
        if fault.after_requests and self._requests_since_armed <= fault.after_requests:
            return False
        times = fault.params.get("times")  # only the next N requests (parse_sim_fault checked it)
        if times is not None and self._requests_since_armed > fault.after_requests + int(times):
            return False
        return self.clock() - self._fault_armed_at >= fault.after_seconds

    def note_request(self) -> None:
        """Count an arriving generation request (faults armed `after=N` key off this)."""
        self.requests_seen += 1
        self._requests_since_armed += 1

    @property
    def slow_factor(self) -> float:
        if self.fault_active("slow"):
            return float(self.fault.value) if self.fault.value else 4.0
        return 1.0

    @property
    def batch_limit(self) -> int:
        if self.fault_active("saturate"):
            return int(self.fault.value) if self.fault.value else 1
        return self.config.max_running

    def park(self) -> asyncio.Event:
        """A request the front end swallows: it waits on this until disarm, release or shutdown."""
        released = asyncio.Event()
        if self.closed:
            released.set()
        self.parked.add(released)
        return released

    def release_parked(self) -> None:
        for event in self.parked:
            event.set()
        self.parked.clear()

    # --- requests ---------------------------------------------------------------------------

    def submit(self, request: Request) -> None:
        self.waiting.append(request)
        self.idle_since = None
        self._work.set()

    def abort(self, request: Request) -> None:
        """The client went away. A zombie fault keeps it decoding; otherwise it leaves the batch."""
        if request.finished or request.aborted:
            return
        if self.fault_active("zombie"):
            return  # the client left, the engine decodes on
        request.aborted = True
        self.finished_by_reason["abort"] += 1
        if request in self.running:
            self.running.remove(request)
            if "stuck-after-abort" in self.quirks:
                self.aborted_stuck += 1
        else:
            try:
                self.waiting.remove(request)
            except ValueError:
                pass
        request.wake.set()
        self._note_idle()

    def close(self) -> None:
        """Shutdown: wake every waiter so each handler ends its response."""
        self.closed = True
        for request in [*self.running, *self.waiting]:
            request.aborted = True
            request.wake.set()
        self.running.clear()
        self.waiting.clear()
        self.release_parked()
        self._work.set()

    # --- what the gauges say ----------------------------------------------------------------

    def live_counts(self) -> tuple[int, int]:
        return len(self.running), len(self.waiting)

    def gauges(self) -> tuple[int, int]:
        """(running, queued) as the dialect would publish them now, quirks included."""
        running, queued = self.live_counts()
        if self.config.dialect == "vllm":
            return running + self.aborted_stuck, queued
        if "decode-log-interval" not in self.quirks:
            return running, queued
        if running == 0 and queued == 0 and self.idle_since is not None:
            stale_for = self.config.idle_stale_s if "idle-stale" in self.quirks else 0.0
            if self.clock() - self.idle_since >= stale_for:
                return 0, 0
        return self.published

    def _publish(self) -> None:
        self.published = self.live_counts()

    def _note_idle(self) -> None:
        if not self.running and not self.waiting and self.idle_since is None:
            self.idle_since = self.clock()

    # --- the step loop ------------------------------------------------------------------------

    async def run(self) -> None:
        config = self.config
        while not self.closed:
            if not self.running and not self.waiting:
                self._note_idle()
                self._work.clear()
                self.step_deadline = None  # the next busy period starts its steps afresh
                await self._work.wait()
                continue
            now = self.clock()
            limit = self.batch_limit
            admitted = False
            while self.waiting and len(self.running) < limit:
                request = self.waiting.popleft()
                request.ready_at = now + config.ttft + request.first_token_delay
                self.prompt_tokens_total += request.prompt_tokens  # vLLM counts prompt tokens at prefill
                self.realtime_tokens["prefill_compute"] += request.prompt_tokens
                self.running.append(request)
                admitted = True
            if admitted:
                self._publish()  # SGLang writes its gauges when a prefill batch is scheduled
            step = decode_step_seconds(config, len(self.running)) * self.slow_factor
            # Paced by deadline: each step starts where the previous one was due to end, not where
            # its sleep happened to wake. Sleeping a full step after each wake-up added the step's
            # own work and the loop's timer rounding (asyncio's epoll waits in whole milliseconds) to
            # every step: --itl 0.0089 and 0.010 both ran at ~10.1 ms a token, so two engines 12%
            # apart priced about 1% apart. A step that falls a whole step behind (a stalled loop, a
            # hang lifted) starts afresh instead of bursting to catch up.
            deadline = self.step_deadline
            if deadline is None or now - deadline > step:
                deadline = now
            self.step_deadline = deadline = deadline + step
            await asyncio.sleep(max(0.0, deadline - self.clock()))
            if self.fault_active("hang"):
                continue  # busy and stuck: nothing decodes, so not even the 40-step gauge refresh happens
            self._decode_step()

    def _decode_step(self) -> None:
        now = self.clock()
        step_latency = now - self.last_step_at if self.last_step_at is not None else self.config.itl
        self.last_step_at = now
        tokens = first_tokens = 0
        done: list[Request] = []
        for request in self.running:
            if request.ready_at > now:
                continue
            request.produced += 1
            tokens += 1
            if request.first_token_at is None:
                first_tokens += 1
                request.first_token_at = now
                if self.observes_latency:
                    self.ttft.observe(now - request.arrived)
                    self.ttft_by_stream[request.streaming].observe(now - request.arrived)
            if request.produced >= request.max_tokens:
                request.finished = True
                request.finish_reason = "length"
                done.append(request)
            elif request.produced == request.stop_after:
                request.finished = True
                request.finish_reason = "stop"
                done.append(request)
            request.wake.set()
        if tokens > first_tokens:
            # A request's first token is time-to-first-token, not an inter-token latency (as in SGLang).
            if self.observes_latency:
                self.itl.observe(min(step_latency, 10.0), tokens - first_tokens)
            # The first token comes out of the prefill forward; later ones are decode tokens.
            self.realtime_tokens["decode"] += tokens - first_tokens
        if tokens:
            self.generation_tokens_total += tokens
            self.decode_steps += 1
            if self.decode_steps % self.config.decode_log_interval == 0:
                self._publish()
        if done:
            finished = set(map(id, done))
            self.running = [r for r in self.running if id(r) not in finished]
            for request in done:
                self.requests_finished += 1
                self.finished_by_reason[request.finish_reason or "stop"] += 1
                # SGLang's token counters move only when a request finishes.
                self.sglang_prompt_tokens[request.streaming] += request.prompt_tokens
                self.sglang_generation_tokens[request.streaming] += request.produced
                self.sglang_requests[request.streaming] += 1
            self._note_idle()  # gauges() reports idle from here (after 30 s with the idle-stale quirk)

    def state(self) -> dict:
        running, queued = self.live_counts()
        published_running, published_queued = self.gauges()
        return {
            "dialect": self.config.dialect, "role": self.config.role, "model": self.config.model,
            "running": running, "queued": queued, "parked": len(self.parked),
            "gauge_running": published_running, "gauge_queued": published_queued,
            "requests_seen": self.requests_seen, "requests_finished": self.requests_finished,
            "generation_tokens_total": self.generation_tokens_total, "decode_steps": self.decode_steps,
            "fault": self.fault.text if self.fault else None,
            "fault_active": bool(self.fault and self.fault_active(self.fault.name)),
            "quirks": sorted(self.quirks),
        }
