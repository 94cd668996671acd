"""`repro sim`: run the simulated engine in the foreground."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from repro.sim.config import DIALECTS, NO_FAULT, QUIRKS, ROLES, SIM_FAULTS

    p = subparsers.add_parser(
        "sim", help="run the simulated engine (SGLang or vLLM dialect, with faults)",
        description="An OpenAI-compatible simulated engine with real SGLang/vLLM metric dialects and injectable "
                    f"server-side faults: {', '.join(SIM_FAULTS)} (spec NAME[=VALUE][,after=N]).",
        # The quirks as rows (NAME<tab>TEXT, laid out by repro/commands/help.py), then the runtime arming.
        epilog="quirks (--quirks):\n" + "\n".join(f"{k}\t{v}" for k, v in QUIRKS.items())
               + f"\n\nAt runtime: POST /sim/fault {{\"spec\": \"SPEC\"}} arms a fault; POST /sim/fault "
                 f"{{\"spec\": \"{NO_FAULT}\"}} or DELETE /sim/fault lifts it.",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: never exposed unless asked)")
    p.add_argument("--port", type=int, default=30000, help="port (0 picks a free one; default 30000 like SGLang)")
    p.add_argument("--dialect", choices=DIALECTS, default="sglang")
    p.add_argument("--model", default="sim-model")
    p.add_argument("--ttft", type=float, default=0.02, help="seconds to first token")
    p.add_argument("--itl", type=float, default=0.005, help="seconds per decode step (inter-token latency)")
    p.add_argument("--itl-per-request", type=float, default=0.0,
                   help="seconds a decode step grows by per running request (default 0: a flat --itl)")
    p.add_argument("--wave-size", type=int, default=0,
                   help="W: a decode step grows by --wave-step every W running requests (default 0: off)")
    p.add_argument("--wave-step", type=float, default=0.0, help="seconds per wave of --wave-size requests")
    p.add_argument("--cuda-graph-max-bs", type=int,
                   help="SGLang's setting: batches above it run without CUDA graphs, each step "
                        "--no-graph-slowdown times slower (default: unset, every batch graphed)")
    p.add_argument("--no-graph-slowdown", type=float, default=1.13,
                   help="step time factor of a batch above --cuda-graph-max-bs (default 1.13)")
    p.add_argument("--api-key", help="SGLang's --api-key: reported in /server_info as SGLang reports it "
                                     "(for testing redaction; requests are not checked against it)")
    p.add_argument("--max-tokens-default", type=int, default=16, help="output length when a request sets none")
    p.add_argument("--reply-tokens", type=int, default=0, metavar="N",
                   help="the model ends each text reply after N tokens (finish stop), as a real model does; "
                        "harnesses ask for tens of thousands of tokens (default 0: until max_tokens)")
    p.add_argument("--tool-rounds", type=int, default=0, metavar="N",
                   help="a scripted agent loop for a real harness: the first N model calls of a conversation "
                        "offered tools each call one, then the model answers in text (default 0: "
                        "--tool-call-share decides)")
    p.add_argument("--tool-name", metavar="NAME", help="with --tool-rounds: the tool to call when offered "
                   "(e.g. Read, read; several comma-separated: the first offered)")
    p.add_argument("--tool-path", metavar="PATH", help="with --tool-rounds: the value of every path-like "
                   "argument (a file the harness may read)")
    p.add_argument("--max-running", type=int, default=64, help="batch size; beyond it a FIFO queue")
    p.add_argument("--role", choices=ROLES, default="unified", help="PD disaggregation role")
    p.add_argument("--keepalive", type=float, default=5.0, help="keep-alive timeout in seconds")
    p.add_argument("--fault", metavar="SPEC",
                   help="NAME[=VALUE][,after=N|after=Ts], e.g. hang,after=3 or slow=4 or saturate; after=N counts "
                        "the engine's requests across all connections (the 4th request on, for after=3); "
                        f"{NO_FAULT} (the default): no fault")
    p.add_argument("--quirks", help=f"comma list replacing the dialect's defaults, or 'none' ({', '.join(QUIRKS)})")
    p.add_argument("--tool-call-share", type=float, default=0.5,
                   help="of chat requests that offer tools, the share answered with streamed tool calls "
                        "(deterministic per request; default 0.5)")
    p.add_argument("--context-length", type=int,
                   help="the model's context in tokens (vLLM's --max-model-len, SGLang's --context-length): a longer "
                        "prompt gets the engine's own 400; /v1/models reports it as max_model_len (default: no limit)")
    p.add_argument("--exit-with-stdin", action="store_true",
                   help="stop when stdin closes (used when a parent process owns this engine)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from repro.core.errors import UsageError
    from repro.sim.config import SimConfig
    from repro.sim.server import serve_forever

    quirks = None
    if args.quirks is not None:
        quirks = frozenset() if args.quirks.strip() == "none" else frozenset(
            q.strip() for q in args.quirks.split(",") if q.strip())
    config = SimConfig(dialect=args.dialect, model=args.model, ttft=args.ttft, itl=args.itl,
                       max_tokens_default=args.max_tokens_default, reply_tokens=args.reply_tokens, tool_rounds=args.tool_rounds,
                       tool_name=args.tool_name, tool_path=args.tool_path, max_running=args.max_running, fault=args.fault,
                       quirks=quirks, role=args.role, host=args.host, port=args.port, keepalive=args.keepalive,
                       itl_per_request=args.itl_per_request, wave_size=args.wave_size, wave_step=args.wave_step,
                       cuda_graph_max_bs=args.cuda_graph_max_bs, no_graph_slowdown=args.no_graph_slowdown,
                       api_key=args.api_key, tool_call_share=args.tool_call_share,
                       context_length=args.context_length)
    config.validate()  # a SimConfigError or FaultSpecError names the setting and the fix
    try:
        serve_forever(config, announce=lambda line: print(line, flush=True), exit_with_stdin=args.exit_with_stdin)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port} ({exc.strerror}): pick another --port, or 0 for a free one") from None
    return 0
