"""A harness as users write them: a multi-round streamed conversation with the official openai SDK.

    python tests/harnesses/openai_chat.py --client async|sync --base-url http://127.0.0.1:PORT/v1

`async` uses AsyncOpenAI, whose httpx pool keeps one connection alive and reuses it for every
round; `sync` uses OpenAI. Timeouts are large and retries off, so a stuck round stays stuck (as a
real harness would sit) until the process is stopped. Progress goes to stdout as JSON lines,
flushed: {"event": "start"|"done"|"deadlocked", "round": N, "t": wall-clock seconds, ...}, so a test
knows when a round began and when the last one finished (`--say-reply`: the done line carries the
reply's text, as an agent prints its answer). `--rounds N`: it exits 0 after round N; an error
the SDK raises ends it with a traceback and exit 1.

`--deadlock-after N --deadlock lock|event`: after round N the harness deadlocks in its own code, as
harnesses do: `lock` takes a threading.Lock it already holds (a non-reentrant lock taken again on
the same path; the thread, the event loop's own with `async`, blocks in the kernel's futex for
good); `event` (async only) awaits an asyncio.Event nothing will set (the loop idles in epoll_wait,
the coroutine never resumes). Its connections stay as the SDK left them: AsyncOpenAI's one pooled
keep-alive connection, idle; OpenAI's closed after each streamed completion.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time

from openai import AsyncOpenAI, OpenAI

MODEL = "sim-model"


def say(event: str, round_index: int, **extra: object) -> None:
    sys.stdout.write(json.dumps({"event": event, "round": round_index, "t": time.time(), **extra}) + "\n")
    sys.stdout.flush()


def ask(history: list[dict], round_index: int) -> None:
    history.append({"role": "user", "content": f"round {round_index}: tell me more"})


HISTORY_LOCK = threading.Lock()  # guards the conversation's history; not reentrant


def save_history(history: list[dict]) -> None:
    """Where the harness deadlocks: it takes the history lock, then calls a helper that takes it
    again (a bug as harnesses have them: a non-reentrant lock on a path that re-enters)."""
    with HISTORY_LOCK:
        compact_history(history)


def compact_history(history: list[dict]) -> None:
    with HISTORY_LOCK:  # already held by this very thread: blocks for good
        del history[:-20]


async def wait_for_approval() -> None:
    """The async deadlock: an approval event that nothing will ever set."""
    approved = asyncio.Event()
    await approved.wait()


def reply_of(args: argparse.Namespace, history: list[dict]) -> dict:
    """With --say-reply, the reply's text for the progress line (as an agent prints its answer)."""
    return {"reply": history[-1]["content"]} if args.say_reply else {}


def deadlock_now(args: argparse.Namespace, round_index: int) -> bool:
    return args.deadlock_after is not None and round_index == args.deadlock_after


async def run_async(args: argparse.Namespace) -> None:
    client = AsyncOpenAI(base_url=args.base_url, api_key="sk-harness", timeout=args.timeout, max_retries=args.retries)
    history: list[dict] = []
    for round_index in range(1, args.rounds + 1):
        ask(history, round_index)
        say("start", round_index)
        stream = await client.chat.completions.create(model=MODEL, messages=history, stream=True,
                                                      max_tokens=args.max_tokens)
        reply = []
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                reply.append(chunk.choices[0].delta.content)
        history.append({"role": "assistant", "content": "".join(reply)})
        say("done", round_index, chars=len(history[-1]["content"]), **reply_of(args, history))
        if deadlock_now(args, round_index):
            say("deadlocked", round_index, how=args.deadlock)
            if args.deadlock == "event":
                await wait_for_approval()
            else:
                save_history(history)  # blocks the event loop's own thread
        await asyncio.sleep(args.think)


def run_sync(args: argparse.Namespace) -> None:
    client = OpenAI(base_url=args.base_url, api_key="sk-harness", timeout=args.timeout, max_retries=args.retries)
    history: list[dict] = []
    for round_index in range(1, args.rounds + 1):
        ask(history, round_index)
        say("start", round_index)
        stream = client.chat.completions.create(model=MODEL, messages=history, stream=True, max_tokens=args.max_tokens)
        reply = []
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                reply.append(chunk.choices[0].delta.content)
        history.append({"role": "assistant", "content": "".join(reply)})
        say("done", round_index, chars=len(history[-1]["content"]), **reply_of(args, history))
        if deadlock_now(args, round_index):
            say("deadlocked", round_index, how=args.deadlock)
            save_history(history)
        time.sleep(args.think)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=("async", "sync"), required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--think", type=float, default=0.5, help="seconds between rounds")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=600.0, help="the SDK's timeout: large, so a stuck round stays stuck")
    parser.add_argument("--deadlock-after", type=int, default=None, metavar="N",
                        help="after round N, deadlock in the harness's own code (see --deadlock)")
    parser.add_argument("--deadlock", choices=("lock", "event"), default="lock",
                        help="lock: a threading.Lock taken twice; event: an asyncio.Event never set (async only)")
    parser.add_argument("--retries", type=int, default=0, help="the SDK's max_retries (0: a failed round ends it)")
    parser.add_argument("--say-reply", action="store_true", help="print each reply's text in its done line")
    args = parser.parse_args()
    if args.deadlock == "event" and args.client != "async":
        parser.error("--deadlock event needs --client async")
    if args.client == "async":
        asyncio.run(run_async(args))
    else:
        run_sync(args)


if __name__ == "__main__":
    main()
