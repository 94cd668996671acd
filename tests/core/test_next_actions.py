"""Every verdict kind has a next action, defined once (repro.core.next_actions), naming something
on-call can act on: the hop, or a command to run. The refusal kinds' advice is the sentence their
summary ends with, not a second wording of it; the JSON gains `next_action` and keeps every key."""

from __future__ import annotations

import pytest

from repro.core.next_actions import ACTIONS, ADVICE, KINDS, TLS_ADVICE, next_action
from tests.support.verdict_cases import CASES, make

CONTRACT_KEYS = {"side", "where", "kind", "confidence", "phase", "conversation", "round", "stalled_for_s", "evidence",
                 "ruled_out", "summary", "outcome", "failure", "status"}
NO_HOP = (None, "client", "connection", "harness")
# What the client sends is what to change: the engine that said no is not what to act on.
ABOUT_THE_REQUEST = ("context-exceeded",)


def test_every_kind_has_an_action_and_no_action_names_a_kind_that_is_not():
    assert set(ACTIONS) == set(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_each_next_action_names_the_hop_or_a_command(kind):
    verdict = CASES[kind]
    action = next_action(verdict)
    assert action.do and action.confirm and action.attach
    assert "repro " in action.confirm, action.confirm  # something to run to confirm
    if verdict.where not in NO_HOP and kind not in ABOUT_THE_REQUEST:
        assert verdict.where in action.do + action.confirm, (kind, action)
    assert "{" not in action.do + action.confirm  # every placeholder filled
    # What to attach: the run folder and its report, or triage's own output.
    assert ("repro report RUN_DIR" in action.attach) != (verdict.round == 0)


@pytest.mark.parametrize("kind", [k for k in KINDS if CASES[k].where not in NO_HOP and k not in ABOUT_THE_REQUEST])
def test_the_hop_named_is_the_verdicts_own(kind):
    case = CASES[kind]
    moved = make(kind, case.side, "edge-7", case.summary.replace(str(case.where), "edge-7"), [])
    action = next_action(moved)
    assert "edge-7" in action.do + action.confirm and case.where not in action.do.replace("nginx:", ""), action


@pytest.mark.parametrize("kind", ["request-too-large", "context-exceeded", "rate-limited", "request-rejected"])
def test_a_refusal_reuses_the_verdicts_own_advice(kind):
    verdict = CASES[kind]
    action = next_action(verdict)
    assert action.advice is not None and action.do == verdict.advice
    assert verdict.to_dict()["summary"] == f"{verdict.summary}; {verdict.advice}"  # the JSON's summary as before
    assert any(action.do.startswith(sentence.split("{")[0]) for sentence in ADVICE.values())


def test_a_tls_refusal_reuses_the_tls_advice():
    action = next_action(CASES["tls-rejected"])
    assert action.do == TLS_ADVICE["unknown-ca"]


def test_a_refusal_without_advice_still_gets_one():
    """So does a verdict of a log written before verdicts carried `advice`: its summary still ends
    with the advice, which is not looked for there; the kind's own entry stands."""
    bare = make("request-rejected", "client", "nginx", "nginx refused the request itself with HTTP 400", [])
    action = next_action(bare)
    assert action.advice is None and action.do == ADVICE["request"].format(hop="nginx")
    old = make("request-rejected", "client", "nginx", "nginx refused the request itself with HTTP 400; "
               + ADVICE["key"], [])
    assert next_action(old).do == ADVICE["request"].format(hop="nginx") and old.to_dict()["summary"] == old.summary


def test_the_json_keeps_every_key_of_the_contract_and_adds_next_action():
    for verdict in CASES.values():
        data = verdict.to_dict()
        assert set(data) == CONTRACT_KEYS | {"next_action"}
        assert data["side"] in ("client", "server", "unknown")
        assert data["next_action"] == next_action(verdict).to_dict()
        assert set(data["next_action"]) == {"do", "confirm", "attach"}


def test_a_summary_quoting_braces_is_said_as_it_is():
    """A refusal quoting an upstream's JSON ({"detail":"Not Found"}) once crashed the panel: the
    summary's advice was formatted a second time."""
    summary = 'litellm answered HTTP 404, quoting its upstream (OpenAI provider): "{"detail":"Not Found"}"'
    action = next_action(make("request-rejected", "client", "litellm", summary, [],
                              advice=ADVICE["upstream-path"].format(hop="litellm")))
    assert action.do == ADVICE["upstream-path"].format(hop="litellm")


def test_no_advice_starts_with_a_placeholder():
    # The claims test finds an advice in a summary by its words before the first "{".
    assert all(sentence.split("{")[0] for sentence in ADVICE.values())
