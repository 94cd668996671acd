"""A realistic verdict of every kind (repro.core.kinds.Kind), for the tests of what a verdict says
and how it is printed. Summaries, evidence and ruled-out lines are in the words classify() writes
(several copied from real runs: the wedge, the hang, the dead target, nginx's 413)."""

from __future__ import annotations

from repro.core.verdict import Verdict

LAG = ("client", "event-loop lag p99", "3 ms")
LAG_RULED = "client: event-loop lag p99 3 ms, below 1000 ms"
ENGINE_IDLE = [("engine-0", "canary", "fresh canary 200 in 0.03 s"), ("engine-0", "/health", "200"),
               ("engine-0", "running/queued", "0 running, 0 queued"),
               ("engine-0", "token progress since the stall", "0.0/s")]
ENGINE_IDLE_RULED = "engine-0: idle, 0 running, 0 queued, tokens 0.0/s; fresh canary 200 in 0.03 s"
SERVE = "engines serve fresh requests"


def make(kind: str, side: str, where: str | None, summary: str, evidence: list[tuple[str, str, str]],
         ruled_out: list[str] = (), phase: str | None = "before-first-byte", outcome: str = "stalled",
         failure: str | None = None, status: int | None = None, round: int = 4, stalled: float | None = 2.1,
         confidence: str = "high", advice: str | None = None) -> Verdict:
    return Verdict(side=side, where=where, kind=kind, confidence=confidence, phase=phase, conversation=1, round=round,
                   stalled_for_s=stalled, summary=summary, ruled_out=list(ruled_out), outcome=outcome,
                   failure=failure, status=status, advice=advice,
                   evidence=[{"hop": e[0], "signal": e[1], "value": e[2], "at": 3.5 + i / 100} | typed(*e)
                             for i, e in enumerate(evidence)])


def typed(hop: str, signal: str, value: str, fields: dict | None = None) -> dict:
    """The typed fields classify sets beside an entry's words (repro.core.evidence.fact): given as
    a fourth item, else those of the signals whose words are always made one way here: a "round
    failed" entry restates its signal, a canary's words hold its status ("fresh canary 200 in ..."
    answered, "fresh canary failed (...)" did not; a failed one's status is not carried here)."""
    if fields is not None:
        return fields
    if signal == "round failed":
        return {"restates": True}
    if signal == "canary":
        ok = not value.startswith("fresh canary failed")
        return {"ok": ok, "status": int(value.split()[2])} if ok else {"ok": False}
    return {}


def driver_socket(hop: str, local: int, remote: int, quiet: float = 2.1) -> tuple[str, str, str]:
    return (hop, "socket", f"the driver 127.0.0.1:{local} -> 127.0.0.1:{remote} ESTABLISHED: last byte received "
                           f"{quiet:.1f} s ago, sent {quiet:.1f} s ago; unread 0 B, unacknowledged 0 B")


def pid_socket(hop: str, local: int, remote: int, recv: str, sent: str, unread: int = 0,
               pid: int = 4242) -> tuple[str, str, str, dict]:
    return (hop, "socket", f"pid {pid} 127.0.0.1:{local} -> 127.0.0.1:{remote} ESTABLISHED: last byte received "
                           f"{recv} ago, sent {sent} ago; unread {unread} B, unacknowledged 0 B", {"pid": pid})


def failed(kind: str, side: str, where: str | None, summary: str, evidence, failure: str, status: int | None = None,
           **kw) -> Verdict:
    return make(kind, side, where, summary, evidence, outcome="failed", failure=failure, status=status,
                stalled=kw.pop("stalled", 0.012), **kw)


CASES: dict[str, Verdict] = {
    "client-overloaded": make(
        "client-overloaded", "client", "client",
        "the driver's own event loop lagged 1840 ms (p99): it could not read what arrived",
        [("client", "event-loop lag p99", "1840 ms"), driver_socket("proxy", 40112, 8080)] + ENGINE_IDLE,
        [ENGINE_IDLE_RULED]),
    "judge-overloaded": make(
        "judge-overloaded", "unknown", None,
        "repro's judging process lagged 1210 ms (p99) while it read the hops and sent the canaries: what it saw "
        "is late by as much and cannot place this stall",
        [LAG, ("client", "judging process's event-loop lag p99", "1210 ms")], [LAG_RULED], confidence="low"),
    "client-queued": failed(
        "client-queued", "client", "client",
        "the round's deadline passed while the client itself held it: waited 30.0 s for a connection of the pool "
        "(--connections pool=2, 2 in use)",
        [LAG, ("target", "round failed", "round failed: the round deadline passed while the client itself held it "
               "before-first-byte after 30.0 s")], "client-wait", stalled=30.0),
    "harness-idle": make(
        "harness-idle", "client", "harness",
        "pid 4242 has no request outstanding on any of its 1 connection(s) to the stack (nginx 127.0.0.1:51234: "
        "its last request answered (bytes came after it), nothing queued either way, quiet 12.4 s; no thread reads "
        "it): it is not waiting on the network; where pid 4242's threads wait: thread 4242 (MainThread) futex "
        "(futex_wait_queue) in acquire (harness.py:88)",
        [pid_socket("nginx", 51234, 8080, "12.4 s", "12.5 s"), pid_socket("nginx", 51240, 8080, "0.2 s", "0.2 s"),
         pid_socket("nginx", 51260, 9113, "0.1 s", "0.1 s"),
         ("harness", "pid 4242 thread 4242 (MainThread)", "futex (futex_wait_queue): acquire (harness.py:88) <- "
          "run_tools (harness.py:140) <- main (harness.py:201)"),
         ("nginx", "canary", "fresh canary 200 in 0.04 s"), ("engine-0", "canary", "fresh canary 200 in 0.03 s")],
        ["nginx: fresh canary 200 in 0.04 s", "engine-0: idle, 0 running, 0 queued; fresh canary 200 in 0.03 s"],
        phase=None, round=0, stalled=12.4),
    "round-deadline": failed(
        "round-deadline", "unknown", None,
        "the round was still receiving (0.4 s since its last event) when its deadline passed: nothing was stuck; "
        f"it ran longer than --round-timeout ({SERVE})",
        [LAG, ("client", "silent before the deadline", "0.4 s"), ("engine-0", "canary", "fresh canary 200 in 0.03 s")],
        "deadline", ruled_out=[LAG_RULED, "engine-0: busy, 4 running, 0 queued, tokens 812.0/s; fresh canary 200 "
                               "in 0.03 s"], phase="mid-stream", confidence="low", stalled=0.4),
    "connection-wedged": make(
        "connection-wedged", "client", "proxy",
        "every fresh path answers, but this round is stuck on its reused keep-alive connection (127.0.0.1:36758); "
        "proxy holds it: a connection-level wedge, not the engine",
        [LAG, driver_socket("proxy", 36758, 47633)] + ENGINE_IDLE + [
            ("proxy", "this round's flow", "held-request"), ("proxy", "canary", "fresh canary 200 in 0.03 s"),
            ("proxy", "/health", "200"), ("proxy", "in flight", "4"),
            ("proxy", "holds requests", "4")],
        [LAG_RULED, ENGINE_IDLE_RULED]),
    "request-withheld": make(
        "request-withheld", "client", "nginx",
        "pid 4242: 1 connection(s) wait (request sent and acknowledged, nothing received since); no byte received "
        "for up to 9.8 s, nothing unread in its own receive queue; nginx's fresh canary fails (timeout: no "
        "response headers in 3 s) while the engines serve fresh requests",
        [pid_socket("nginx", 51234, 8080, "9.8 s", "9.6 s"), pid_socket("nginx", 51236, 8080, "0.3 s", "0.3 s"),
         ("nginx", "canary", "fresh canary failed (timeout: no response headers in 3 s)")] + ENGINE_IDLE,
        [ENGINE_IDLE_RULED], round=0, stalled=9.8),
    "response-withheld": make(
        "response-withheld", "client", "nginx",
        "the engines run this round and move tokens (engine-0: 1 running, tokens 240.0/s) while the round has "
        "received no byte for 2.1 s: nginx buffers the whole response (a hop that buffers whole bodies)",
        [LAG, driver_socket("nginx", 41000, 8080), ("engine-0", "running/queued", "1 running, 0 queued"),
         ("engine-0", "token progress since the stall", "240.0/s"),
         ("nginx", "canary", "fresh canary failed (timeout: no SSE data event in 1 s (status 200))")],
        [LAG_RULED], phase="before-first-byte"),
    "engine-hung": make(
        "engine-hung", "server", "engine-0",
        "engine-0 holds requests (5 running, 0 queued), no token moved since the stall, and a fresh request failed "
        "(timeout: no SSE data event in 1 s (status 200))",
        [LAG, driver_socket("engine-0", 50268, 39219),
         ("engine-0", "canary", "fresh canary failed (timeout: no SSE data event in 1 s (status 200))"),
         ("engine-0", "/health", "200"), ("engine-0", "running/queued", "5 running, 0 queued"),
         ("engine-0", "token progress since the stall", "0.0/s")], [LAG_RULED], phase="mid-stream"),
    "engine-saturated": make(
        "engine-saturated", "server", "engine-0",
        "engine-0 is full: 64 running, 31 queued, tokens still moving (1890.0/s), and a fresh request waited 2.8 s "
        "for its first token",
        [LAG, ("engine-0", "running/queued", "64 running, 31 queued"),
         ("engine-0", "token progress since the stall", "1890.0/s"),
         ("engine-0", "canary", "fresh canary 200 in 2.81 s")], [LAG_RULED, "proxy: fresh canary 200 in 2.84 s"]),
    "engine-overloaded": failed(
        "engine-overloaded", "server", "engine-0",
        "round failed: HTTP 529 before-first-byte after 0.0 s, on a connection reused after 0.0 s idle (Server: "
        "uvicorn); engine-0 turns fresh requests away, saying it is overloaded: a fresh request failed (http 529: "
        '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})',
        [LAG, ("engine-0", "round failed", "round failed: HTTP 529 before-first-byte after 0.0 s, on a connection "
               "reused after 0.0 s idle (Server: uvicorn)"),
         ("engine-0", "canary", 'fresh canary failed (http 529: {"type":"error","error":{"type":"overloaded_error",'
          '"message":"Overloaded"}})'), ("engine-0", "/health", "200"),
         ("engine-0", "running/queued", "0 running, 0 queued")], "http", status=529, ruled_out=[LAG_RULED]),
    "engine-slow": make(
        "engine-slow", "server", "engine-0",
        "engine-0 moves tokens slowly: 2 running, 0 queued, recent inter-token latency 410 ms, tokens 4.9/s",
        [LAG, ("engine-0", "recent inter-token latency", "410 ms"), ("engine-0", "running/queued", "2 running, "
         "0 queued"), ("engine-0", "token progress since the stall", "4.9/s")],
        [LAG_RULED], phase="mid-stream", confidence="medium"),
    "engine-frontend-lost": make(
        "engine-frontend-lost", "server", "engine-0",
        "engine-0 answers /health (200) and its metrics page, but a fresh request gets no answer (timeout: no "
        "response headers in 3 s): its front end no longer reaches the scheduler (sglang#33858)",
        [LAG, ("engine-0", "/health", "200"), ("engine-0", "metrics page", "answered 0.2 s after the stall"),
         ("engine-0", "canary", "fresh canary failed (timeout: no response headers in 3 s)"),
         ("engine-0", "running/queued", "0 running, 0 queued")], [LAG_RULED]),
    "engine-unreachable": failed(
        "engine-unreachable", "server", "target",
        "round failed: the connection was refused or failed before-first-byte after 0.0 s; nothing listens on "
        "127.0.0.1:39999 (connection refused): the engine target is down, or the port is wrong",
        [("target", "round failed", "round failed: the connection was refused or failed before-first-byte after "
          "0.0 s"), ("target", "canary", "fresh canary failed (connect: connection refused)"),
         ("target", "/health", "no answer"),
         ("target", "metrics page", "answered no read (never seen answering) (connect: connection refused)")],
        "connect", round=1, confidence="medium"),
    "engine-unresponsive": make(
        "engine-unresponsive", "server", "engine-0",
        "engine-0 accepts connections and answers nothing: a fresh request got no answer (timeout: no response "
        "headers in 3 s), no /health, and its metrics page went silent 2.0 s ago after answering before",
        [LAG, ("engine-0", "canary", "fresh canary failed (timeout: no response headers in 3 s)"),
         ("engine-0", "/health", "no answer"),
         ("engine-0", "metrics page", "went silent 2.0 s ago (timeout), answered before"),
         ("engine-0", "running/queued before the stall", "3 running, 0 queued, 4.1 s before it (history)")],
        [LAG_RULED]),
    "hop-unresponsive": make(
        "hop-unresponsive", "client", "haproxy",
        "haproxy answers neither a fresh request (timeout: no response headers in 3 s) nor its metrics page "
        "(timeout, answered before): a frozen process, not one that withholds on purpose; engines serve fresh "
        "requests",
        [LAG, driver_socket("haproxy", 42110, 8081),
         ("haproxy", "canary", "fresh canary failed (timeout: no response headers in 3 s)"),
         ("haproxy", "metrics page", "went silent 2.2 s ago (timeout), answered before")] + ENGINE_IDLE,
        [LAG_RULED, ENGINE_IDLE_RULED]),
    "hop-unreachable": failed(
        "hop-unreachable", "client", "nginx",
        f"{SERVE}, but nginx took no connection: nothing listens on 127.0.0.1:8080 (connection refused), nginx is "
        "down or the port is wrong",
        [("nginx", "round failed", "round failed: the connection was refused or failed before-first-byte after "
          "0.0 s"), ("nginx", "canary", "fresh canary failed (connect: connection refused)"),
         ("engine-0", "canary", "fresh canary 200 in 0.03 s")],
        "connect", ruled_out=["engine-0: idle, 0 running, 0 queued; fresh canary 200 in 0.03 s"]),
    "hop-error": failed(
        "hop-error", "client", "nginx",
        f"{SERVE}, but nginx answered HTTP 502; a fresh request through it gets the same",
        [("nginx", "round failed", "round failed: HTTP 502 before-first-byte after 0.0 s (Server: nginx/1.22.1)"),
         ("nginx", "answered by", "the body: nginx's error page (<center>nginx/1.22.1</center>)"),
         ("nginx", "canary", "fresh canary failed (http: HTTP 502)"), ("engine-0", "canary", "fresh canary 200 in "
                                                                                              "0.03 s")],
        "http", status=502, ruled_out=["engine-0: idle, 0 running, 0 queued; fresh canary 200 in 0.03 s"]),
    "engine-error": failed(
        "engine-error", "server", "engine-0",
        "engine-0 answered HTTP 500; a fresh request gets the same",
        [("engine-0", "round failed", "round failed: HTTP 500 before-first-byte after 0.1 s (Server: uvicorn)"),
         ("engine-0", "answered by", "the body: vLLM's error JSON"),
         ("engine-0", "canary", "fresh canary failed (http: HTTP 500)")], "http", status=500),
    "keepalive-race": failed(
        "keepalive-race", "client", "nginx",
        f"{SERVE} and every fresh path answers, but this round's connection was reused after 75.2 s idle and nginx "
        "closed it as the request went out: a keep-alive race (the client kept the connection longer than the "
        "server does)",
        [("nginx", "round failed", "round failed: the peer closed the connection before-first-byte after 0.0 s, on "
          "a connection reused after 75.2 s idle"), ("nginx", "canary", "fresh canary 200 in 0.04 s"),
         ("engine-0", "canary", "fresh canary 200 in 0.03 s")], "early-close",
        ruled_out=["engine-0: idle, 0 running, 0 queued; fresh canary 200 in 0.03 s"]),
    "connection-reset": failed(
        "connection-reset", "client", "nginx",
        f"{SERVE} and every fresh path answers, but this round's connection broke (the connection was reset)",
        [("nginx", "round failed", "round failed: the connection was reset mid-stream after 1.2 s"),
         ("nginx", "canary", "fresh canary 200 in 0.04 s"), ("engine-0", "canary", "fresh canary 200 in 0.03 s")],
        "reset", phase="mid-stream", confidence="medium",
        ruled_out=["engine-0: idle, 0 running, 0 queued; fresh canary 200 in 0.03 s"]),
    "request-rejected": failed(
        "request-rejected", "client", "engine-0",
        "round failed: HTTP 400 before-first-byte after 0.0 s (the request carried tool definitions); engine-0 "
        "refused the request itself with HTTP 400: \"\"auto\" tool choice requires --enable-auto-tool-choice and "
        "--tool-call-parser to be set\"",
        [("engine-0", "round failed", "round failed: HTTP 400 before-first-byte after 0.0 s (the request carried "
          "tool definitions)"), ("engine-0", "answered by", "the body: vLLM's error JSON ({\"error\": {..., \"code\": "
                                                             "400}})")], "http", status=400,
        advice="it carried tool definitions, which a server without a tool-call parser refuses: drop --tools or "
               "enable the engine's tool calling"),
    "tls-rejected": failed(
        "tls-rejected", "client", "nginx",
        "round failed: the TLS handshake failed before-first-byte after 0.0 s; our client refused nginx's "
        "certificate (unknown CA: its issuer is not trusted here): no request was sent",
        [("nginx", "round failed", "round failed: the TLS handshake failed before-first-byte after 0.0 s"),
         ("nginx", "canary", "fresh canary failed (tls-rejected: unknown CA: its issuer is not trusted here (unable "
          "to get local issuer certificate))"), ("nginx", "/health", "no answer"),
         ("engine-0", "canary", "fresh canary 200 in 0.03 s"), ("engine-0", "/health", "200")], "tls", stalled=0.067,
        advice="trust its CA: --ca-file PATH or SSL_CERT_FILE (--insecure skips the check, for a test)"),
    "request-too-large": failed(
        "request-too-large", "client", "nginx",
        "round failed: HTTP 413 before-first-byte after 0.0 s, on a connection reused after 0.0 s idle (Server: "
        "nginx/1.22.1); nginx refused the request with HTTP 413 (nginx's error page (<center>nginx/1.22.1</center>)):"
        " round 5 of conversation 0 sent 8,706 bytes (9 messages, 8,321 characters), its messages grew by 1,704 "
        "characters per round, round 4 was answered, so the conversation crossed the limit at round 5",
        [("nginx", "round failed", "round failed: HTTP 413 before-first-byte after 0.0 s, on a connection reused "
          "after 0.0 s idle (Server: nginx/1.22.1)"),
         ("nginx", "answered by", "the body: nginx's error page (<center>nginx/1.22.1</center>)"),
         ("nginx", "request body", "8,706 bytes (9 messages, 8,321 characters)"),
         ("nginx", "messages grew", "1,704 characters per round"),
         ("nginx", "last answered round", "round 4")], "http", status=413,
        advice="the conversation's history outgrew nginx's request-body limit: trim or summarise what each round "
               "sends, or raise the limit (nginx: client_max_body_size, default 1m)"),
    "context-exceeded": failed(
        "context-exceeded", "client", "engine-0",
        "round failed: HTTP 400 before-first-byte after 0.0 s (Server: nginx/1.22.1); engine-0 refused the prompt "
        "with HTTP 400 (context 1600 tokens, prompt at least 1601 tokens, as its own text states): \"This model's "
        "maximum context length is 1600 tokens. However, your prompt contains at least 1601 input tokens, ...\"; "
        "round 4 of conversation 0 sent 6,939 bytes (7 messages, 6,617 characters)",
        [("engine-0", "round failed", "round failed: HTTP 400 before-first-byte after 0.0 s (Server: nginx/1.22.1)"),
         ("nginx", "answered by", "the body: vLLM's error JSON, on the only engine behind nginx"),
         ("engine-0", "context", "context 1600 tokens, prompt at least 1601 tokens", {"restates": True})], "http", status=400,
        advice="the conversation outgrew the model's context: trim or summarise its history, ask for fewer "
               "max_tokens, or serve a model with a longer context"),
    "rate-limited": failed(
        "rate-limited", "client", "nginx",
        f"round failed: HTTP 429 before-first-byte after 0.0 s (Server: nginx/1.22.1); {SERVE}, but nginx limits "
        "the request rate: HTTP 429: \"429 Too Many Requests\"",
        [("nginx", "round failed", "round failed: HTTP 429 before-first-byte after 0.0 s (Server: nginx/1.22.1)"),
         ("nginx", "answered by", "the body: nginx's error page (<center>nginx/1.22.1</center>)"),
         ("engine-0", "canary", "fresh canary 200 in 0.03 s")], "http", status=429,
        ruled_out=["engine-0: idle, 0 running, 0 queued; fresh canary 200 in 0.03 s"],
        advice="send fewer requests at once (fewer --conversations), wait as long as its Retry-After asks when it "
               "gives one, or raise nginx's rate limit"),
    "no-evidence": make(
        "no-evidence", "unknown", None,
        "no hop's evidence places this stall: no metrics page was read since it began, and no canary ran",
        [LAG, driver_socket("target", 40500, 30000, 2.3),
         ("target", "metrics page", "not read since the stall (no metrics page given)")],
        [LAG_RULED], confidence="low", stalled=2.3),
}
