"""The words the simulated engine generates: deterministic text that needs no JSON escaping."""

WORDS = tuple(
    ["the", "engine", "answers", "every", "round", "with", "plain", "words", "so", "that", "conversations", "grow", "like", "an", "agent", "loop", "tool", "call", "result", "plan", "check", "retry", "stream", "token", "batch", "queue", "proxy", "router", "request", "reply", "history", "context", "latency", "progress", "steady", "healthy"]
)
