"""A harness as users write them: a multi-round streamed conversation with the official openai SDK.

    python tests/harnesses/openai_chat.py --client async|sync --base-url http://127.0.0.1:PORT/v1

`async` uses AsyncOpenAI, whose httpx pool keeps one connection alive and reuses it for every
round; `sync` uses OpenAI. Timeouts are large and retries off, so a stuck round stays stuck (as a
real harness would sit) until the process is stopped. Progress goes to stdout as JSON lines,
flushed: {"event": "start"|"done", "round": N, "t": wall-clock seconds, ...}, so a test knows when
a round began and when the last one finished.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from openai import AsyncOpenAI, OpenAI

MODEL = "sim-model"


def say(event: str, round_index: int, **extra: object) -> None:
    sys.stdout.write(json.dumps({"event": event, "round": round_index, "t": time.time(), **extra}) + "\n")
    sys.stdout.flush()


def ask(history: list[dict], round_index: int) -> None:
    history.append({"role": "user", "content": f"round {round_index}: tell me more"})


async def run_async(args: argparse.Namespace) -> None:
    client = AsyncOpenAI(base_url=args.base_url, api_key="sk-harness", timeout=args.timeout, max_retries=0)
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
        say("done", round_index, chars=len(history[-1]["content"]))
        await asyncio.sleep(args.think)


def run_sync(args: argparse.Namespace) -> None:
    client = OpenAI(base_url=args.base_url, api_key="sk-harness", timeout=args.timeout, max_retries=0)
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
        say("done", round_index, chars=len(history[-1]["content"]))
        time.sleep(args.think)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=("async", "sync"), required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--think", type=float, default=0.5, help="seconds between rounds")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=600.0, help="the SDK's timeout: large, so a stuck round stays stuck")
    args = parser.parse_args()
    if args.client == "async":
        asyncio.run(run_async(args))
    else:
        run_sync(args)


if __name__ == "__main__":
    main()
