"""Soak: many rounds through the fault proxy while it cycles a mix of faults; nothing may leak.

    .venv/bin/python benchmarks/soak.py                       # 20 000 rounds x 200 conversations
    .venv/bin/python benchmarks/soak.py --rounds-total 400 --conversations 20 --json-out soak.json

One `repro run` built in-process (repro.session.run.Run), as the CLI builds it: the embedded engine (a
child process), the mitmproxy fault proxy in front of it (by default a mitmdump child process, as
a real proxy is its own process; `--proxy-mode inprocess` runs it on a thread of this process, which
then also measures mitmproxy's memory and lets its work lag the driver's loop),
probes, the live judge and the run log. A fault cycler thread arms a fault on the running proxy
for a short window, disarms it and releases any held flow, over and over, so that rounds fail,
stall, get cut and reconnect the whole way through.

Checked, before vs after (or warm-up vs end): open file descriptors (/proc/self/fd), threads,
asyncio tasks left in the run's loop and in the proxy's loop when the driver finishes, the
proxy's open and held flows, resident memory (RSS samples against rounds done), and that every
round has an outcome (completed, failed or stalled; none lost). Prints one JSON object; exit 0
when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from repro.load.driver import DriverConfig  # noqa: E402
from repro.load.prompts import PromptSource  # noqa: E402
from repro.session.run import Run, RunSettings  # noqa: E402

# (spec, window seconds). Failures (cuts), slowness, and stalls (held flows, released at disarm).
FAULT_MIX: list[tuple[str, float]] = [
    ("hold-response,path=/v1/chat", 1.5),  # longer than the stall trigger: stalls, verdicts, canaries
    ("delay=20", 0.3),
    ("truncate-reset=2", 0.15),
    ("slow-drip=10", 0.3),
    ("drop", 0.1),
    ("keepalive-race", 0.3),
    ("buffer", 0.3),
    ("truncate-hold=1,path=/v1/chat", 0.2),
]
PASS_WINDOW_S = 0.25  # healthy time between two faults


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def loop_tasks(loop: asyncio.AbstractEventLoop | None) -> int | None:
    """Tasks not done in another thread's loop, counted inside that loop."""
    if loop is None or loop.is_closed():
        return None

    async def count() -> int:
        return sum(1 for t in asyncio.all_tasks() if not t.done()) - 1  # minus this one

    try:
        return asyncio.run_coroutine_threadsafe(count(), loop).result(5)
    except Exception:  # noqa: BLE001 - a loop that cannot answer is reported as unknown
        return None


class SoakRun(Run):
    """A Run that takes its end-of-run measurements while the stack is still up."""

    at_finish: dict = {}
    before_finish: list = []  # callables run first, while the stack is up (stop the fault cycler)

    def _finish(self):
        for call in self.before_finish:
            call()
        proxy = self.handles.get("proxy")
        self.at_finish = {
            "run_loop_tasks": sum(1 for t in asyncio.all_tasks() if not t.done()) - 1,
            "proxy_loop_tasks": loop_tasks(getattr(proxy, "loop", None)),
            "proxy_state": proxy.state() if proxy is not None else None,
        }
        return super()._finish()


class FaultCycler(threading.Thread):
    """Arms each fault of the mix in turn on the live proxy; stops with a disarm and a release."""

    def __init__(self, proxy, mix: list[tuple[str, float]], pass_window: float) -> None:
        super().__init__(name="soak-fault-cycler", daemon=True)
        self.proxy, self.mix, self.pass_window = proxy, mix, pass_window
        self.stop_event = threading.Event()
        self.armed: Counter[str] = Counter()
        self.released = 0
        self.errors: list[str] = []

    def run(self) -> None:
        index = 0
        while not self.stop_event.wait(self.pass_window):
            spec, window = self.mix[index % len(self.mix)]
            index += 1
            try:
                self.proxy.arm(spec)
                self.armed[spec] += 1
                self.stop_event.wait(window)
                self.proxy.disarm()
                self.released += self.proxy.release()
            except Exception as exc:  # noqa: BLE001 - recorded; the proxy may be stopping
                self.errors.append(f"{spec}: {type(exc).__name__}: {exc}")
                if len(self.errors) > 20:
                    return

    def stop(self) -> None:
        if self.stop_event.is_set():
            return
        self.stop_event.set()
        self.join(10)
        try:
            self.proxy.disarm()
            self.released += self.proxy.release()
        except Exception:  # noqa: BLE001 - proxy already stopped
            pass


class Sampler(threading.Thread):
    """RSS against rounds done, every `interval` seconds."""

    def __init__(self, run: Run, interval: float) -> None:
        super().__init__(name="soak-rss-sampler", daemon=True)
        self.run_, self.interval = run, interval
        self.samples: list[tuple[float, int, float, int]] = []  # (t, rounds done, rss MB, python blocks)
        self.stop_event = threading.Event()
        self.origin = time.monotonic()

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            progress = self.run_.progress  # rounds ended, whichever way
            done = progress.done + progress.failed + progress.stalled
            self.samples.append((round(time.monotonic() - self.origin, 2), done, round(rss_mb(), 1),
                                 sys.getallocatedblocks()))

    def stop(self) -> None:
        self.stop_event.set()
        self.join(5)


def soak(rounds_total: int, conversations: int, *, out: Path, max_tokens: int = 4, stall_after: float = 1.0,
         round_timeout: float = 4.0, warmup: float = 0.25, rss_budget_mb: float = 40.0,
         fault_mix: list[tuple[str, float]] | None = None, pass_window: float = PASS_WINDOW_S,
         run_timeout: float = 1800.0, proxy_mode: str = "subprocess") -> dict:
    rounds = max(1, rounds_total // conversations)
    settings = RunSettings(
        driver=DriverConfig(base_url="", model="", rounds=rounds, conversations=conversations, max_tokens=max_tokens,
                            stall_after=stall_after, round_timeout=round_timeout, connect_timeout=2.0),
        prompts=PromptSource(prompt_chars=24), out=out, inject="pass", proxy_mode=proxy_mode,
        probe_interval=0.5, canary_timeout=1.0,
        run_timeout=run_timeout,
    )
    gc.collect()
    before = {"fds": open_fds(), "threads": threading.active_count(), "os_threads": os_threads(),
              "rss_mb": round(rss_mb(), 1)}
    devnull = open(os.devnull, "w")  # verdict panels go nowhere (a StringIO would grow with them)
    run = SoakRun(settings, console=Console(file=devnull, stderr=False))
    cyclers: list[FaultCycler] = []
    baseline: dict = {}

    def on_started(handles: dict) -> None:
        baseline["proxy_loop_tasks"] = loop_tasks(getattr(handles["proxy"], "loop", None))
        cycler = FaultCycler(handles["proxy"], fault_mix or FAULT_MIX, pass_window)
        cyclers.append(cycler)
        run.before_finish = [cycler.stop]  # stop faulting before the run stops the proxy
        cycler.start()

    run.on_started = on_started
    sampler = Sampler(run, 0.5)
    sampler.start()
    started = time.monotonic()
    try:
        result = run.execute()
    finally:
        for cycler in cyclers:
            cycler.stop()
        sampler.stop()
        devnull.close()
    duration = time.monotonic() - started
    gc.collect()
    time.sleep(0.5)  # let stopped threads and child processes finish exiting
    after = {"fds": open_fds(), "threads": threading.active_count(), "os_threads": os_threads(),
             "rss_mb": round(rss_mb(), 1)}

    statuses = Counter(o.status for o in result.outcomes)
    keys = {(o.conv, o.round) for o in result.outcomes}
    expected = rounds * conversations
    samples = sampler.samples
    warm = [s for s in samples if s[1] >= warmup * expected] or samples[-1:]
    rss_warm = warm[0][2] if warm else before["rss_mb"]
    rss_end = max((s[2] for s in samples), default=after["rss_mb"])
    blocks_warm = warm[0][3] if warm else None
    blocks_end = samples[-1][3] if samples else None
    cycler = cyclers[0] if cyclers else None
    fin = run.at_finish
    proxy_state = fin.get("proxy_state") or {}
    checks = {
        "every round has an outcome": len(result.outcomes) == expected and len(keys) == expected,
        "no round lost or skipped": statuses.get("skipped", 0) == 0,
        "run not cut by its deadline": result.reason == "completed",
        "fds back to baseline": after["fds"] <= before["fds"],
        "threads back to baseline": after["threads"] <= before["threads"] and after["os_threads"] <= before["os_threads"],
        "no tasks left in the run loop": fin.get("run_loop_tasks") == 0,
        # In-process: the proxy's own loop holds no more tasks than at start. As a child process:
        # the process is gone after the run (its tasks went with it).
        "proxy loop tasks back to baseline": (fin.get("proxy_loop_tasks") is not None
                                              and fin.get("proxy_loop_tasks") <= (baseline.get("proxy_loop_tasks") or 0))
        if proxy_mode == "inprocess" else proxy_exited(run),
        "no flows left open or held in the proxy": proxy_state.get("open_flows") == 0
        and proxy_state.get("held_flows") == 0,
        f"RSS flat after warm-up (< {rss_budget_mb:g} MB growth)": rss_end - rss_warm < rss_budget_mb,
        "faults were injected": bool(cycler and sum(cycler.armed.values()) >= 3),
        "fault cycler without errors": bool(cycler and not cycler.errors),
    }
    return {
        "ok": all(checks.values()),
        "checks": checks,
        "rounds_total": expected,
        "conversations": conversations,
        "rounds_per_conversation": rounds,
        "duration_s": round(duration, 1),
        "rounds_per_s": round(expected / duration, 1) if duration else None,
        "outcomes": dict(statuses),
        "verdicts": len(result.summary.get("verdicts", [])),
        "verdict_kinds": dict(Counter(f"{v.get('side')}/{v.get('where')}/{v.get('kind')}"
                                      for v in result.summary.get("verdicts", []))),
        "top_errors": Counter((o.error or "")[:90] for o in result.outcomes if o.status != "completed").most_common(6),
        "reason": result.reason,
        "before": before,
        "after": after,
        "proxy_loop_tasks_at_start": baseline.get("proxy_loop_tasks"),
        "at_finish": {**fin, "proxy_state": {k: proxy_state.get(k) for k in ("open_flows", "held_flows")}},
        "rss_mb": {"warm": rss_warm, "end_max": rss_end, "growth_after_warmup": round(rss_end - rss_warm, 1),
                   "python_blocks_warm": blocks_warm, "python_blocks_end": blocks_end,
                   "samples": samples[:: max(1, len(samples) // 40)]},
        "faults_armed": dict(cycler.armed) if cycler else {},
        "held_flows_released": cycler.released if cycler else 0,
        "cycler_errors": cycler.errors[:5] if cycler else [],
        "run_dir": str(out),
        "log_mb": round((out / "events.jsonl").stat().st_size / 2**20, 1) if (out / "events.jsonl").exists() else None,
    }


def proxy_exited(run: Run) -> bool:
    proc = getattr(run.handles.get("proxy"), "proc", None)
    return proc is not None and proc.poll() is not None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds-total", type=int, default=20_000, help="rounds in all (default 20000)")
    p.add_argument("--conversations", type=int, default=200, help="concurrent conversations (default 200)")
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--stall-after", type=float, default=1.0)
    p.add_argument("--round-timeout", type=float, default=4.0)
    p.add_argument("--rss-budget-mb", type=float, default=40.0, help="allowed RSS growth after warm-up")
    p.add_argument("--proxy-mode", choices=("subprocess", "inprocess"), default="subprocess",
                   help="the fault proxy as a mitmdump child process (default) or on a thread of this process")
    p.add_argument("--out", type=Path, help="run folder (default: a temporary folder)")
    p.add_argument("--json-out", type=Path, help="also write the result JSON here")
    args = p.parse_args(argv)
    if args.rounds_total < args.conversations or args.conversations < 1:
        p.error("--rounds-total must be at least --conversations (and both > 0)")
    with tempfile.TemporaryDirectory(prefix="repro-soak-") as tmp:
        out = args.out or Path(tmp) / "run"
        result = soak(args.rounds_total, args.conversations, out=out, max_tokens=args.max_tokens,
                      stall_after=args.stall_after, round_timeout=args.round_timeout,
                      rss_budget_mb=args.rss_budget_mb, proxy_mode=args.proxy_mode)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
