"""What a simulated engine is: its dialect, its timings, its quirks and the fault it plays."""

from __future__ import annotations

from dataclasses import dataclass

from repro.core.errors import ReproError
from repro.core.faultspec import FaultSpec, FaultSpecError, ValueKind, parse_fault_spec

DIALECTS = ("sglang", "vllm")
ROLES = ("unified", "prefill", "decode")

# Server-side faults. VALUE meanings: slow=K multiplies the inter-token latency by K;
# saturate=N shrinks the batch to N running requests (default 1).
SIM_FAULTS: dict[str, ValueKind] = {
    "hang": ValueKind.NONE,            # admitted requests stay running, no tokens; /metrics and /health still answer
    "slow": ValueKind.OPTIONAL_FLOAT,  # inter-token latency x K (default 4)
    "saturate": ValueKind.OPTIONAL_INT,  # batch of N (default 1): the FIFO queue grows
    "lose": ValueKind.NONE,            # the front end accepts and never answers; the scheduler never sees it (sglang#33858)
    "zombie": ValueKind.NONE,          # keeps decoding after the client disconnects
    "crash": ValueKind.NONE,           # stops listening and drops every connection
    "metrics-down": ValueKind.NONE,    # only /metrics fails (503)
    "no-transfer": ValueKind.NONE,     # PD decode worker: the KV transfer never arrives, request parked before the scheduler
    # Turned away before admission, each in its API's own error envelope (repro/sim/turned_away.py):
    "rate-limit": ValueKind.OPTIONAL_FLOAT,  # 429 with Retry-After: S seconds (default 1)
    "overloaded": ValueKind.NONE,      # 529 overloaded_error on /v1/messages; 503 "busy" on the others, as vLLM/SGLang
}

# Quirks of the real engines that fool naive tools, each switchable (SGLang's
# python/sglang/srt/observability/metrics_collector.py and
# srt/managers/scheduler_components/metrics_reporter.py; vLLM's vllm/v1/metrics/loggers.py).
# Without "older-release" the sim speaks SGLang 0.5.23 and vLLM 0.33.
QUIRKS = {
    # SGLang scheduler gauges are written only on prefill and every --decode-log-interval (40) decode steps.
    "decode-log-interval": "sglang gauges refresh only on prefill or every 40 decode steps",
    # Older SGLang keeps the last busy gauge values for ~30 s after going idle (PR 26495).
    "idle-stale": "sglang gauges keep their last busy values for 30 s after the engine goes idle",
    # vLLM's running gauge can stay non-zero after requests were aborted (vllm#22545).
    "stuck-after-abort": "vllm running gauge keeps counting requests aborted by a client disconnect",
    # SGLang with --enable-priority-scheduling: every scheduler series carries priority="" (the
    # total) and the queue gauges add one row per priority beside it (_log_gauge_queue_count).
    "priority-scheduling": "sglang queue gauges carry a priority=\"\" total row beside per-priority rows",
    # vLLM started without --enable-auto-tool-choice and --tool-call-parser refuses a request with
    # tools whose tool_choice is (or defaults to) "auto": 400, in vLLM's words (serving_chat.py).
    "no-tool-parser": "vllm without --enable-auto-tool-choice: a request with tools and tool_choice auto gets 400",
    # A server whose /v1/models cards carry no max_model_len (an OpenAI-compatible front end that
    # leaves it out): the context is then read from SGLang's /server_info, or probed.
    "no-max-model-len": "/v1/models lists no max_model_len",
    # A server that does not serve a wire API answers its path 404 (FastAPI's {"detail": "Not Found"}):
    # LiteLLM's openai/ provider translates /v1/messages into the engine's /v1/responses, which then
    # fails while chat completions work (docs/commands.md#wire-apis---api-chatresponsesmessages).
    "no-messages-api": "no /v1/messages (Anthropic Messages API): 404",
    "no-responses-api": "no /v1/responses (OpenAI Responses API): 404",
    # What SGLang looked like before 0.5.23, for tools that still meet it in the field.
    "older-release": "sglang before 0.5.23: num_prefill_prealloc_queue_reqs, /get_load not /v1/loads, no "
                     "moe_ep_rank/engine_type/is_streaming labels, no realtime_tokens_total or "
                     "http_requests_active, TTFT/ITL observed on PD prefill workers too",
}
DEFAULT_QUIRKS = {"sglang": frozenset({"decode-log-interval"}), "vllm": frozenset()}


class SimConfigError(ReproError, ValueError):
    """Bad simulated-engine settings; one line naming the input and the fix."""


# The faults that turn single requests away, and so may turn away only some: times=N.
PER_REQUEST_FAULTS = ("rate-limit", "overloaded")


def parse_sim_fault(text: str) -> FaultSpec:
    """An engine fault. Its after=N counts the engine's requests across all connections, as the
    fault proxy's after=N does by default: the engine sees requests, not the client's connections,
    so per= (and any other option) is refused rather than ignored. A fault that turns requests away
    takes times=N too: it turns away the N requests after after=N and serves the rest (an engine's
    limit that some requests meet and others, a fresh canary among them, do not)."""
    spec = parse_fault_spec(text, SIM_FAULTS, what="engine fault")
    times = spec.params.get("times")
    if times is not None and spec.name in PER_REQUEST_FAULTS:
        if not times.isdigit() or int(times) < 1:
            raise FaultSpecError(f"engine fault {text!r}: times must be a whole number of requests, 1 or more, "
                                 f"got {times!r}")
        if len(spec.params) == 1 and not spec.per_connection:
            return spec
    if spec.params or spec.per_connection:
        extra = next(iter(spec.params), "per")
        raise FaultSpecError(f"engine fault {text!r}: the engine takes only after=N (its requests, across all "
                             f"connections) or after=Ts, not {extra}=; per-connection faults are the proxy's "
                             "(--inject wedge-after=N)")
    return spec


# The spec that lifts a fault: what the ready line prints when there is none, so what it says works
# as typed, in --fault and in POST /sim/fault (DELETE /sim/fault does the same).
NO_FAULT = "none"


def armed_sim_fault(text: str | None) -> FaultSpec | None:
    """The fault a spec arms: None for no spec or `none`, else parse_sim_fault's."""
    if text is None or text.strip().lower() in ("", NO_FAULT):
        return None
    return parse_sim_fault(text)


@dataclass
class SimConfig:
    dialect: str = "sglang"
    model: str = "sim-model"
    ttft: float = 0.02          # seconds from admission to the first token (prefill)
    itl: float = 0.005          # seconds per decode step (its fixed part: see engine.decode_step_seconds)
    itl_per_request: float = 0.0  # seconds a decode step grows by per running request
    wave_size: int = 0          # W: a step grows by wave_step every W running requests (0: no waves)
    wave_step: float = 0.0
    cuda_graph_max_bs: int | None = None  # SGLang's --cuda-graph-max-bs; None: every batch graphed
    no_graph_slowdown: float = 1.13  # step time x this for a batch above cuda_graph_max_bs (run eagerly)
    api_key: str | None = None  # SGLang's --api-key: shown in /server_info as SGLang shows it (not enforced)
    max_tokens_default: int = 16
    # A model ends its reply by itself: after this many tokens, finish "stop" (0: never, it writes
    # until max_tokens). Harnesses ask for tens of thousands of tokens and wait for the model's end.
    reply_tokens: int = 0
    # A scripted agent loop for a real harness (repro.sim.tool_calls.ToolScript): N tool rounds
    # calling the tool named, with this file for path arguments, then text. 0 rounds: off.
    tool_rounds: int = 0
    tool_name: str | None = None
    tool_path: str | None = None
    max_running: int = 64       # batch size; beyond it a FIFO queue
    fault: str | None = None
    quirks: frozenset[str] | None = None  # None: the dialect's defaults
    role: str = "unified"       # PD disaggregation role for the router's PD mode
    host: str = "127.0.0.1"     # safe default: never exposed unless asked
    port: int = 0               # 0: a free port
    keepalive: float = 5.0      # SGLang/vLLM (uvicorn) default keep-alive
    health_generate_timeout: float = 5.0
    idle_stale_s: float = 30.0
    decode_log_interval: int = 40
    tool_call_share: float = 0.5  # of chat requests offering tools (tool_choice "auto"), how many call one
    # The model's context in tokens (vLLM's --max-model-len, SGLang's --context-length): a prompt
    # past it is refused with the engine's own 400 (repro/sim/context.py). None: no limit enforced.
    context_length: int | None = None

    def validate(self) -> SimConfig:
        if self.dialect not in DIALECTS:
            raise SimConfigError(f"unknown dialect {self.dialect!r}: use one of {', '.join(DIALECTS)}")
        if self.role not in ROLES:
            raise SimConfigError(f"unknown role {self.role!r}: use one of {', '.join(ROLES)}")
        for name, value in (("ttft", self.ttft), ("itl", self.itl)):
            if not value >= 0:
                raise SimConfigError(f"{name} must be >= 0 seconds, got {value!r}")
        if self.reply_tokens < 0:
            raise SimConfigError(f"--reply-tokens must be 0 (no end of its own) or more, got {self.reply_tokens}")
        if self.max_running < 1 or self.max_tokens_default < 1:
            raise SimConfigError("max-running and max-tokens must be at least 1")
        for name, value in (("itl-per-request", self.itl_per_request), ("wave-step", self.wave_step),
                            ("wave-size", self.wave_size)):
            if not value >= 0:
                raise SimConfigError(f"--{name} must be >= 0, got {value!r}")
        if self.cuda_graph_max_bs is not None and self.cuda_graph_max_bs < 1:
            raise SimConfigError(f"--cuda-graph-max-bs must be at least 1, got {self.cuda_graph_max_bs!r}")
        if not self.no_graph_slowdown >= 1:
            raise SimConfigError(f"--no-graph-slowdown must be >= 1 (eager steps are not faster), "
                                 f"got {self.no_graph_slowdown!r}")
        unknown = set(self.active_quirks) - set(QUIRKS)
        if unknown:
            raise SimConfigError(f"unknown quirk(s) {', '.join(sorted(unknown))}: use {', '.join(QUIRKS)}")
        if not 0 <= self.tool_call_share <= 1:
            raise SimConfigError(f"--tool-call-share must be between 0 and 1, got {self.tool_call_share!r}")
        if self.context_length is not None and self.context_length < 2:
            raise SimConfigError(f"--context-length must be at least 2 tokens, got {self.context_length!r}")
        armed_sim_fault(self.fault)
        return self

    @property
    def active_quirks(self) -> frozenset[str]:
        return DEFAULT_QUIRKS[self.dialect] if self.quirks is None else frozenset(self.quirks)

    @property
    def current_release(self) -> bool:
        """Today's names and endpoints (SGLang 0.5.23, vLLM 0.33) rather than an older release's."""
        return "older-release" not in self.active_quirks

    def to_args(self) -> list[str]:
        """Command-line flags for `repro sim` that recreate this config in another process."""
        args = ["--dialect", self.dialect, "--model", self.model, "--ttft", repr(self.ttft), "--itl", repr(self.itl),
                "--max-tokens-default", str(self.max_tokens_default), "--reply-tokens", str(self.reply_tokens),
                "--tool-rounds", str(self.tool_rounds),
                *(["--tool-name", self.tool_name] if self.tool_name else []),
                *(["--tool-path", self.tool_path] if self.tool_path else []), "--max-running", str(self.max_running),
                "--role", self.role, "--host", self.host, "--port", str(self.port), "--keepalive", repr(self.keepalive)]
        if armed_sim_fault(self.fault):
            args += ["--fault", self.fault]
        if self.quirks is not None:
            args += ["--quirks", ",".join(sorted(self.quirks)) or "none"]
        args += ["--tool-call-share", repr(self.tool_call_share)]
        args += ["--itl-per-request", repr(self.itl_per_request), "--wave-size", str(self.wave_size),
                 "--wave-step", repr(self.wave_step), "--no-graph-slowdown", repr(self.no_graph_slowdown)]
        if self.cuda_graph_max_bs is not None:
            args += ["--cuda-graph-max-bs", str(self.cuda_graph_max_bs)]
        if self.api_key:
            args += ["--api-key", self.api_key]
        if self.context_length is not None:
            args += ["--context-length", str(self.context_length)]
        return args
