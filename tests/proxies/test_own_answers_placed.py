"""The fault proxy's own answers (`status=`, `body-limit=`) are placed on the proxy, never on the engine
behind it: its short JSON is shaped like an engine's (`"code": 429`), and before its `x-repro-fault`
header `repro run --inject status=429` judged SERVER-SIDE at engine-0 (engine-saturated; a 503 or
529, engine-overloaded; a 413, request-too-large at engine-0), although the request never left it."""

from __future__ import annotations

import pytest

from tests.support.runs import kinds, repro_run

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]


@pytest.mark.parametrize("fault, expected", [
    ("status=429,after=2", ("client", "proxy", "rate-limited")),
    ("status=503,after=2", ("client", "proxy", "hop-error")),
    ("body-limit=600", ("client", "proxy", "request-too-large")),
])
def test_the_fault_proxys_own_answer_is_the_proxys(fault, expected, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)  # the embedded engine, behind the fault proxy
    code, summary, err = repro_run("--rounds", "3", "--conversations", "1", "--inject", fault,
                                   "--out", str(tmp_path / "run"), timeout=90)
    assert kinds(summary) == {expected}, summary["verdicts"]
    answered = next(e for e in summary["verdicts"][0]["evidence"] if e["signal"] == "answered by")
    assert answered["hop"] == "proxy" and "x-repro-fault" in answered["value"], answered
    assert code == 10, err[-2000:]
