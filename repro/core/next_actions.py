"""What on-call does next, for every verdict kind: what to restart or change, what to run to
confirm, what to attach to the incident. One place for all of it, the refusal kinds' advice
included (the rules of repro.core.rules give a verdict its closing advice from the sentences defined
here), so a verdict's advice and its next action never say two different things.

Pure: it reads a verdict's kind, where, round and advice (any object with those attributes; this
module does not import the Verdict, which imports it for its `next_action` key).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, get_args

from repro.core.kinds import Kind

# The advice each refusal kind ends with: one sentence per cause, fitting what fixes it (the claims
# test checks that a verdict carries its own kind's advice and no other's).
ADVICE = {
    "request-too-large": "the conversation's history outgrew {hop}'s request-body limit: trim or summarise what "
                         "each round sends, or raise the limit ({knob})",
    "context-exceeded": "the conversation outgrew the model's context: trim or summarise its history, ask for "
                        "fewer max_tokens, or serve a model with a longer context",
    "rate-limited": "send fewer requests at once (fewer --conversations), wait as long as its Retry-After asks "
                    "when it gives one, or raise {hop}'s rate limit",
    "key": "check the API key (--api-key, or the environment variable the harness reads)",
    "model": "check the model name (--model; `GET /v1/models` lists what {hop} serves)",
    "url": "check the URL: the base URL and path {hop} serves",
    "upstream-path": "configure the provider {hop} sends this API through to speak what the engine serves "
                     "(LiteLLM: hosted_vllm/ sends chat completions, openai/ sends /v1/responses), or serve that "
                     "path on the engine",
    "tools": "it carried tool definitions, which a server without a tool-call parser refuses: drop --tools or "
             "enable the engine's tool calling",
    "slow": "it gave up waiting for the rest of the request: look at what delays the harness's sending",
    "request": "check the API key, the model name and the URL against what {hop} accepts",
}
# Which verdict kind each advice belongs to: a verdict carries its own kind's advice and no other's.
ADVICE_KIND = {"request-too-large": "request-too-large", "context-exceeded": "context-exceeded",
               "rate-limited": "rate-limited", "key": "request-rejected", "model": "request-rejected",
               "url": "request-rejected", "upstream-path": "request-rejected", "tools": "request-rejected", "slow": "request-rejected",
               "request": "request-rejected"}
# A hop that cuts a fresh stream mid-way while the engine behind it serves its own (a connection-reset
# at that hop): what closes streams there. Kept out of ADVICE, whose sentences a kind always carries
# (a round whose connection broke is connection-reset too, and cut nothing fresh).
CUT_STREAM_ADVICE = ("check what makes {hop} close a stream mid-way: its read and idle timeouts towards its "
                     "upstream, its buffer limits, its maximum response body size")


def cut_stream_advice(hop: str, status: int | None) -> str | None:
    """The advice for a hop whose fresh canary's connection it closed: for a stream it cut mid-way
    (its 200 already sent), what closes streams; before any answer, None (the kind's own)."""
    return CUT_STREAM_ADVICE.format(hop=hop) if status == 200 else None
# Where each server keeps its request-body limit (the knob the advice names).
BODY_LIMIT_KNOB = {"nginx": "nginx: client_max_body_size, default 1m", "haproxy": "HAProxy: the rule that denies "
                   "large bodies (req.body_size)", "caddy": "Caddy: request_body max_size",
                   "envoy": "Envoy: the buffer filter's max_request_bytes"}
# What fixes a certificate our client refused, by the reason the handshake gave (kinds.TlsReason).
TLS_ADVICE = {
    "unknown-ca": "trust its CA: --ca-file PATH or SSL_CERT_FILE (--insecure skips the check, for a test)",
    "name-mismatch": "use a URL whose host the certificate names, or give the hop a certificate naming this host",
    "expired": "renew the hop's certificate (or check this machine's clock)",
    "not-yet-valid": "check this machine's clock, or the certificate's start date",
    "handshake": "check that the hop speaks TLS on this port (https:// to a plain-HTTP port fails so)",
}

TRIAGE = "repro triage --pid PID --hop name={hop},url=URL"  # while the harness is still stuck
PROBE = "repro probe URL"

# Per kind: (what to restart or change, what to run to confirm). {hop} is the verdict's `where`.
# Every entry names the hop or a command, so on-call has something to act on (tests hold it).
ACTIONS: dict[str, tuple[str, str]] = {
    "client-overloaded": (
        "give the client more CPU or fewer rounds at once (fewer --conversations, or --workers N to "
        "shard them); the serving stack is not the cause",
        "repro run with fewer --conversations: the stall should not come back"),
    "judge-overloaded": (
        "run fewer --workers, or on a less loaded machine: the judge saw the hops late and placed nothing",
        "repro run with fewer --workers"),
    "client-queued": (
        "raise the client's own limit (--connections pool=N, or the SDK's max connections and retry "
        "back-off): the request never left the client",
        "repro run with a larger --connections pool=N"),
    "harness-idle": (
        "look in the harness's own code where its threads wait (listed above, and in triage's --json): "
        "no request is outstanding on the network, and every hop serves",
        "repro triage --pid PID again: its threads still waiting in the same place confirm it"),
    "round-deadline": (
        "raise --round-timeout if rounds this long are expected, or ask for fewer max_tokens; no hop is "
        "blamed",
        "repro run with a larger --round-timeout"),
    "connection-wedged": (
        "restart {hop}, or stop reusing idle keep-alive connections through it (fresh connections work): "
        "check its keep-alive and upstream timeouts; do not revert the engines",
        "repro run --connections fresh (a new connection every round) should not stall; repro run --inject "
        "wedge-after=3 shows this verdict on a known wedge"),
    "request-withheld": (
        "restart {hop} and check its request buffering and upstream settings: it does not pass requests "
        "on; do not revert the engines",
        TRIAGE + ": {hop}'s fresh canary fails while the engines' own answer"),
    "response-withheld": (
        "turn off response buffering at {hop} (nginx: proxy_buffering off; X-Accel-Buffering: no) so "
        "streamed tokens pass as they come; do not revert the engines",
        TRIAGE + ": {hop}'s fresh canary gets no token while the engines' own answer"),
    "hop-unresponsive": (
        "restart {hop}: it answers neither a fresh request nor its metrics page (a stopped, frozen or "
        "exhausted process); save its state first (its log, a stack dump)",
        TRIAGE + ": {hop}'s canary and metrics page still silent"),
    "hop-unreachable": (
        "start {hop}, or check the port (and host) of its URL: it refuses connections",
        PROBE + " ({hop}'s URL): it answers once it is back"),
    "hop-error": (
        "read {hop}'s error log for the status it answers, and fix its upstream configuration",
        TRIAGE + ": {hop}'s fresh canary gets the same error"),
    "engine-hung": (
        "restart the engine {hop}: it holds requests and moves no token; dump its stacks first (py-spy "
        "dump --pid ENGINE_PID) for the engine's developers",
        TRIAGE + ": {hop} still holds requests with no token moving; repro run --sim-fault hang,after=3 "
        "shows this verdict on a known hang"),
    "engine-saturated": (
        "add engine capacity or send less load: {hop} is full and queues; do not revert its settings on "
        "this alone",
        "repro bench --concurrency 16,32,64 against {hop}: throughput flat while latency climbs"),
    "engine-overloaded": (
        "send less load or add engine capacity: {hop} says itself it is overloaded and turns requests "
        "away (a client that retries them slows down rather than hangs)",
        "repro bench --concurrency 16,32,64 against {hop}: the concurrency at which it starts answering 503 "
        "or 529"),
    "engine-slow": (
        "compare {hop} with the previous build or settings before reverting anything: it moves tokens, "
        "slowly",
        "repro bench --target URL_A --target-b URL_B: the cost of the change, with confidence intervals"),
    "engine-frontend-lost": (
        "restart {hop}: its front end answers /health or metrics but passes no request to the "
        "scheduler (sglang#33858)",
        TRIAGE + ": {hop}'s fresh canary still fails while /health answers"),
    "engine-unreachable": (
        "check the port (and host) of {hop}'s URL, or start the engine {hop}: it refuses connections",
        PROBE + " ({hop}'s URL): it answers once it is up"),
    "engine-unresponsive": (
        "restart the engine {hop}: it accepts connections and answers nothing (no token, /health or "
        "metrics); dump its stacks first (py-spy dump --pid ENGINE_PID)",
        TRIAGE + ": {hop} still silent"),
    "engine-error": (
        "read {hop}'s log for the error it answers: the engine itself fails the request",
        TRIAGE + ": {hop}'s fresh canary gets the same error"),
    "keepalive-race": (
        "make the client's idle keep-alive timeout shorter than {hop}'s, or retry a request whose reused "
        "connection was closed as it went out",
        "repro run --keepalive-expiry S, S below {hop}'s keep-alive timeout: no such failure"),
    "connection-reset": (
        "read {hop}'s log for what reset the connection (a restart, a timeout, a connection limit)",
        TRIAGE + ": {hop}'s fresh canary shows whether it resets fresh connections too"),
    # The refusal kinds: the verdict's own advice (ADVICE, TLS_ADVICE) leads; these stand in when it
    # has none (a log written before verdicts carried their advice).
    "request-rejected": (ADVICE["request"], "repro probe URL, and GET /v1/models, against {hop}"),
    "tls-rejected": (
        "fix the certificate {hop} presents or the client's trust of it (--ca-file PATH or SSL_CERT_FILE)",
        "repro probe https://... of {hop} with the --ca-file you mean to use"),
    "request-too-large": (ADVICE["request-too-large"].replace(" ({knob})", ""),
                          "repro report RUN_DIR: the bytes each round sent and where they crossed the limit"),
    "context-exceeded": (ADVICE["context-exceeded"],
                         "repro report RUN_DIR: the prompt's tokens against the context, round by round"),
    "rate-limited": (ADVICE["rate-limited"], "repro run with fewer --conversations: no HTTP 429"),
    "no-evidence": (
        "give every hop its metrics page (--hop name=...,url=...,metrics=URL) so the next stall is placed",
        "repro triage --pid PID --hop ... while the harness is stuck"),
}
class Judged(Protocol):
    """What this module reads of a verdict (repro.core.verdict.Verdict has all of it)."""

    kind: str
    where: str | None
    round: int
    advice: str | None  # the closing advice the rule that concluded wrote (ADVICE, TLS_ADVICE)


@dataclass(frozen=True)
class NextAction:
    do: str  # what to restart or change
    confirm: str  # what to run to confirm
    attach: str  # what to attach to the incident
    advice: str | None = None  # the verdict's own closing advice, when `do` is that sentence

    def to_dict(self) -> dict[str, str]:
        return {"do": self.do, "confirm": self.confirm, "attach": self.attach}


# An error answer no signal placed on a hop (side unknown): where to look, and how to place it.
UNPLACED_ERROR = (
    "read the error logs of every hop in front of the engines and of the engines at the round's time for "
    "the status it got: the one that logged it answered",
    "repro triage --hop ... (every hop of the stack): a hop whose fresh canary gets the same status made it")


def next_action(verdict: Judged) -> NextAction:
    """What to do about this verdict: every kind has an entry (tests hold it)."""
    hop = verdict.where if verdict.where not in (None, "client", "connection", "harness") else None
    do, confirm = ACTIONS[verdict.kind]
    said = verdict.advice  # None in a log written before verdicts carried it: the kind's own entry stands
    if said is not None:
        do = said
    if hop is None and verdict.kind == "hop-error":
        # No hop placed the answer: on-call reads every log on the path at that moment.
        do, confirm = UNPLACED_ERROR
    name = hop or "the hop"
    triage = verdict.round == 0  # triage judges no round of its own: there is no run folder
    attach = ("triage's output (repro triage ... --json > triage.json) and the harness's logs" if triage else
              "the run folder (events.jsonl) and its report: repro report RUN_DIR writes RUN_DIR/report.html")
    if said is None or do is not said:
        # A template; the verdict's own advice is already said in full (and may quote braces).
        do = do.format(hop=name, knob=f"{name}'s request-body limit")
    return NextAction(do=do, confirm=confirm.format(hop=name), attach=attach, advice=said)


KINDS: tuple[str, ...] = get_args(Kind)
