"""Rules for a round refused for what it sent (a 4xx other than 429): too large for a hop, past the
model's context, a path its upstream does not serve, or its key, model, URL or tools. What the
round's own answer says stands whatever state the hops are in now. The answering hop is `where`;
the side is the client's, whose change fixes it."""

from __future__ import annotations

from dataclasses import dataclass

from repro.core.error_shapes import Said
from repro.core.evidence import Fact, HopEvidence, fact
from repro.core.failures import carried_tools, quoted
from repro.core.next_actions import ADVICE, BODY_LIMIT_KNOB
from repro.core.rules.case import Case, Finding


@dataclass(frozen=True)
class Refusal:
    """Who refused the round, how sure, and what it sent: the evidence every refusal rule reads."""

    hop: HopEvidence | None
    name: str  # the hop's name, or "client" when no hop was given
    said: Said
    sure: bool
    facts: tuple[Fact, ...]
    size: str  # what the round sent and how its conversation grew to it


def refusal(case: Case) -> Refusal | None:
    """The round's refusal, None when it was not refused for what it sent."""
    failure = case.failure
    if not case.failed("http") or failure.status is None or not 400 <= failure.status < 500 or failure.status == 429:
        return None
    found = case.answer
    hop, signal = found.hop, found.signal
    if hop is None and case.evidence.hops:
        hop = case.evidence.hops[0]
        signal = f"the body ({found.said.shape}) and the canaries named no hop: {hop.name} is the first the round reached"
    name = hop.name if hop is not None else "client"
    facts = [fact(name, "answered by", signal, failure.t)] if hop is not None else []
    size, size_facts = request_size(case)
    return Refusal(hop, name, found.said, found.sure, tuple(facts + size_facts), size)


def too_large(case: Case) -> Finding | None:
    """Needs: a 4xx whose body says the request is too large (a 413 page or JSON). Concludes
    request-too-large at the hop that answered, naming its body-limit knob and what was sent."""
    refused = refusal(case)
    if refused is None or refused.said.cause != "too-large":
        return None
    name = refused.name
    knob = BODY_LIMIT_KNOB.get(refused.said.origin or "", f"{name}'s request-body limit")
    return Finding("client", name, "request-too-large", "high" if refused.sure else "medium",
                   f"{name} refused the request with HTTP 413 ({refused.said.shape}): {refused.size}",
                   facts=refused.facts, advice=ADVICE["request-too-large"].format(hop=name, knob=knob))


def past_context(case: Case) -> Finding | None:
    """Needs: a 4xx whose body says the prompt exceeds the model's context. Concludes
    context-exceeded at the engine (the only engine, when a gateway quotes its engine's words),
    with the numbers its own text states and how the conversation grew to it."""
    refused = refusal(case)
    if refused is None or refused.said.cause != "context":
        return None
    where, said = refused.name, refused.said
    if refused.hop is not None and refused.hop.role != "engine":
        engines = case.engines
        where = engines[0].name if len(engines) == 1 else where  # a gateway quoting its engine's words
    stated = context_numbers(said)
    facts = refused.facts + ((fact(where, "context", stated, case.failure.t,
                                   restates=said.limit_tokens is not None),) if stated else ())  # "context N tokens"
    return Finding("client", where, "context-exceeded", "high" if refused.sure else "medium",
                   f"{where} refused the prompt with HTTP {case.failure.status}"
                   + (f" ({stated}, as its own text states)" if stated else "")
                   + f": {quoted(said.message)}; {refused.size}", facts=facts, advice=ADVICE["context-exceeded"])


def upstream_path_refused(case: Case) -> Finding | None:
    """Needs: a gateway's 4xx quoting its upstream's FastAPI 404 (a path the provider does not
    serve). Concludes request-rejected at the gateway, whose upstream setting fixes it."""
    refused = refusal(case)
    if refused is None or refused.said.cause != "upstream-path":
        return None
    name, said = refused.name, refused.said
    return Finding("client", name, "request-rejected", "high" if refused.sure else "medium",
                   f"{name} answered HTTP {case.failure.status}, quoting its upstream ({said.relayed} provider), "
                   f"which answered FastAPI's 404 for a path it does not serve: {quoted(said.message)}",
                   facts=refused.facts, advice=ADVICE["upstream-path"].format(hop=name))


def request_refused(case: Case) -> Finding | None:
    """Needs: any other 4xx but 429. Concludes request-rejected at the hop that answered, for the
    cause its body names (key, model, URL, tools; 408: too slow; a request that carried tools and
    names no cause: its tools), else the request itself."""
    refused = refusal(case)
    if refused is None:
        return None
    name, said, status = refused.name, refused.said, case.failure.status
    cause = said.cause if said.cause in ("key", "model", "url", "tools") else "slow" if status == 408 else "request"
    if cause == "request" and carried_tools(case.failure):
        cause = "tools"  # the one thing such a round added; a server without a tool parser refuses it
    words = f": {quoted(said.message)}" if said.message else ""
    return Finding("client", name, "request-rejected", "high" if refused.sure else "medium",
                   f"{name} refused the request itself with HTTP {status}{words}",
                   facts=refused.facts, advice=ADVICE[cause].format(hop=name))


def context_numbers(said: Said) -> str:
    parts = []
    if said.limit_tokens is not None:
        parts.append(f"context {said.limit_tokens} tokens")
    if said.prompt_tokens is not None:
        parts.append(f"prompt {'at least ' if said.at_least else ''}{said.prompt_tokens} tokens")
    elif said.prompt_chars is not None:
        parts.append(f"prompt {said.prompt_chars} characters")
    return ", ".join(parts)


def request_size(case: Case) -> tuple[str, list[Fact]]:
    """What the round sent and how its conversation grew to it, from the run's own records: the
    request body's bytes, the messages' characters at each recent round start, the last round
    answered in full. Each number said is an evidence entry (hop "client": what we sent)."""
    failure, evidence = case.failure, case.evidence
    sent = [s for s in evidence.sent if s.round <= failure.round]
    this = sent[-1] if sent and sent[-1].round == failure.round else None
    facts: list[Fact] = []
    parts = [f"round {failure.round} of conversation {failure.conv}"]
    if failure.request_bytes is not None:
        parts[-1] += f" sent {failure.request_bytes:,} bytes"
        facts.append(fact("client", "request body", f"{failure.request_bytes:,} bytes",
                          this.t if this is not None else failure.t))
    if this is not None:
        parts[-1] += f" ({this.messages} messages, {this.prompt_chars:,} characters)"
        earlier = sent[-2] if len(sent) > 1 else None
        if earlier is not None and this.round > earlier.round:
            per_round = (this.prompt_chars - earlier.prompt_chars) / (this.round - earlier.round)
            facts.append(fact("client", "messages grew", f"{earlier.prompt_chars:,} characters at round "
                              f"{earlier.round}, {this.prompt_chars:,} at round {this.round}", this.t))
            parts.append(f"its messages grew by {per_round:,.0f} characters per round")
    answered = evidence.last_answered
    if answered is not None and answered < failure.round:
        facts.append(fact("client", "last answered round", str(answered), failure.t))
        parts.append(f"round {answered} was answered, so the conversation crossed the limit at round {failure.round}"
                     if answered == failure.round - 1 else f"its last answered round was {answered}")
    elif failure.round == 1 or (this is not None and this.messages <= 1):
        parts.append("its first round: the very first request was over the limit")
    return ", ".join(parts), facts
