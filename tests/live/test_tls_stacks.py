"""nginx terminating TLS with a private CA (tests/support/tls.py), in front of the simulated engine,
for `run`, `triage` and `probe`: each works with --ca-file and with SSL_CERT_FILE (model discovery
included: no --model), fails as `tls-rejected` (unknown CA) without either, names a certificate
issued for another host a name mismatch, and with --insecure works and says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from repro.sim import SimConfig, serve_in_thread
from tests.support.runs import kinds, repro_run
from tests.support.stacks import StackUnavailable
from tests.support.tls import Pki, tls_nginx

pytestmark = [pytest.mark.network, pytest.mark.timeout(180)]
RUN = ("--rounds", "1", "--conversations", "1", "--stall-after", "2", "--probe-interval", "0.5")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    pki = Pki.create(folder / "pki")
    good, other, old = pki.issue("good"), pki.issue("other", names=["engine.internal"]), pki.issue("old", expired=True)
    with serve_in_thread(SimConfig()) as sim, \
            serve_in_thread(SimConfig(fault="hang,after=1")) as hung:
        try:
            with tls_nginx(sim.url, good, folder / "good") as nginx, \
                    tls_nginx(sim.url, other, folder / "other") as mismatched, \
                    tls_nginx(sim.url, old, folder / "old") as expired, \
                    tls_nginx(hung.url, good, folder / "hung") as in_front_of_hung:
                yield SimpleNamespace(pki=pki, ca=str(pki.ca), sim=sim, nginx=nginx, mismatched=mismatched,
                                      expired=expired, hung=hung, in_front_of_hung=in_front_of_hung)
        except StackUnavailable as exc:
            pytest.skip(str(exc))


def hops(nginx, engine) -> list[str]:
    return ["--hop", f"name=nginx,url={nginx.url}/v1,role=proxy,metrics={nginx.metrics_url}",
            "--hop", f"name=engine-0,url={engine.url},metrics={engine.metrics_url},role=engine"]


def command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "repro", *args], capture_output=True, text=True, timeout=90,
                          env={**os.environ, **env} if env else None)


def only_verdict(summary: dict) -> dict:
    assert len({(v["side"], v["where"], v["kind"]) for v in summary["verdicts"]}) == 1, summary["verdict_tally"]
    return summary["verdicts"][0]


# --- repro run ---------------------------------------------------------------------------------

def test_run_through_tls_with_the_ca_file_completes_and_discovers_the_model(stack):
    code, summary, err = repro_run(*RUN, "--target", f"{stack.nginx.url}/v1", *hops(stack.nginx, stack.sim),
                                   "--ca-file", stack.ca)
    assert code == 0 and summary["rounds_completed"] == 1, err


def test_run_through_tls_with_ssl_cert_file_completes(stack):
    code, summary, err = repro_run(*RUN, "--target", f"{stack.nginx.url}/v1", env={"SSL_CERT_FILE": stack.ca})
    assert code == 0 and summary["rounds_completed"] == 1, err


@pytest.mark.parametrize("client", ["aiohttp", "httpx", "openai-async"])
def test_run_without_the_ca_is_tls_rejected_unknown_ca_client_side(stack, client):
    code, summary, err = repro_run(*RUN, "--client", client, "--target", f"{stack.nginx.url}/v1",
                                   *hops(stack.nginx, stack.sim))
    assert "could not list models" in err and "starting without it" in err  # no usage error: a verdict
    verdict = only_verdict(summary)
    assert (verdict["side"], verdict["where"], verdict["kind"], verdict["failure"]) == (
        "client", "nginx", "tls-rejected", "tls"), verdict
    assert "unknown CA" in verdict["summary"] and "--ca-file" in verdict["summary"]
    assert code == 10, err


@pytest.mark.parametrize(("which", "words"), [("mismatched", "name mismatch"), ("expired", "expired certificate")])
def test_run_against_a_certificate_for_another_name_or_expired_says_so_side_unknown(stack, which, words):
    code, summary, err = repro_run(*RUN, "--target", f"{getattr(stack, which).url}/v1", "--ca-file", stack.ca)
    verdict = only_verdict(summary)
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("unknown", "target", "tls-rejected"), verdict
    assert words in verdict["summary"]
    assert code == 12, err


def test_run_insecure_works_and_every_verdict_says_so(stack):
    code, summary, err = repro_run("--rounds", "2", "--conversations", "1", "--stall-after", "2",
                                   "--probe-interval", "0.5", "--target", f"{stack.in_front_of_hung.url}/v1",
                                   *hops(stack.in_front_of_hung, stack.hung), "--insecure")
    assert summary["rounds_completed"] == 1, err  # the first round, through TLS with no certificate checked
    assert kinds(summary) == {("server", "engine-0", "engine-hung")}, summary["verdicts"]
    for verdict in summary["verdicts"]:
        assert {"hop": "nginx", "signal": "TLS", "value": "certificate not verified (--insecure)"} in [
            {k: e[k] for k in ("hop", "signal", "value")} for e in verdict["evidence"]]
    assert "TLS: certificate not verified (--insecure)" in err  # printed with the verdict, under nginx
    assert code == 11, err


def test_run_with_both_trust_flags_or_a_bad_ca_file_is_a_one_line_usage_error(stack, tmp_path):
    out = command("run", "--target", f"{stack.nginx.url}/v1", "--ca-file", stack.ca, "--insecure")
    assert out.returncode == 2 and "give one of them" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = command("run", "--target", f"{stack.nginx.url}/v1", "--ca-file", str(tmp_path / "none.pem"))
    assert out.returncode == 2 and "--ca-file" in out.stderr and "no such file" in out.stderr


# --- repro triage ------------------------------------------------------------------------------

def triage(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    out = command("triage", "--window", "1", "--interval", "0.5", "--canary-timeout", "1.5", "--json", *args, env=env)
    return out.returncode, json.loads(out.stdout or "{}"), out.stderr


@pytest.mark.parametrize("trust", ["ca-file", "SSL_CERT_FILE"])
def test_triage_through_tls_with_the_ca_finds_nothing_stuck(stack, trust):
    flags, env = (["--ca-file", stack.ca], None) if trust == "ca-file" else ([], {"SSL_CERT_FILE": stack.ca})
    code, result, err = triage(*hops(stack.nginx, stack.sim), *flags, env=env)
    assert code == 0 and result["verdicts"] == [], err
    nginx = result["hops"][0]
    assert nginx["canary"]["ok"] and nginx["canary"]["tls_verified"] is True
    assert nginx["sample"]["ok"], nginx  # its stub_status page, over TLS


def test_triage_without_the_ca_is_tls_rejected_unknown_ca_at_nginx(stack):
    code, result, err = triage(*hops(stack.nginx, stack.sim))
    (verdict,) = result["verdicts"]
    assert (verdict["side"], verdict["where"], verdict["kind"]) == ("unknown", "nginx", "tls-rejected"), verdict
    assert "unknown CA" in verdict["summary"]
    assert code == 12, err


def test_triage_of_a_certificate_for_another_name_is_a_name_mismatch(stack):
    code, result, err = triage(*hops(stack.mismatched, stack.sim), "--ca-file", stack.ca)
    (verdict,) = result["verdicts"]
    assert (verdict["where"], verdict["kind"]) == ("nginx", "tls-rejected") and "name mismatch" in verdict["summary"]
    assert code == 12, err


def test_triage_insecure_reaches_the_hop_and_its_canary_says_unverified(stack):
    code, result, err = triage(*hops(stack.mismatched, stack.sim), "--insecure")
    assert code == 0 and result["verdicts"] == [], err
    assert result["hops"][0]["canary"]["tls_verified"] is False


# --- repro probe -------------------------------------------------------------------------------

def probe(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[dict], str]:
    out = command("probe", "--json", *args, env=env)
    return out.returncode, json.loads(out.stdout or "[]"), out.stderr


def test_probe_over_tls_with_the_ca_file_or_ssl_cert_file_reads_nginx(stack):
    for args, env in ((["--ca-file", stack.ca], None), ([], {"SSL_CERT_FILE": stack.ca})):
        code, rows, err = probe(stack.nginx.metrics_url, *args, env=env)
        assert code == 0 and rows[0]["ok"] and rows[0]["dialect"] == "nginx", (rows, err)
        assert rows[0]["tls_verified"] is True


def test_probe_without_the_ca_or_for_another_name_says_tls_rejected_and_why(stack):
    code, rows, err = probe(stack.nginx.metrics_url)
    assert code == 1 and rows[0]["error"].startswith("tls-rejected: unknown CA"), rows
    code, rows, err = probe(stack.mismatched.metrics_url, "--ca-file", stack.ca)
    assert code == 1 and rows[0]["error"].startswith("tls-rejected: name mismatch"), rows


def test_probe_insecure_reads_and_says_so(stack):
    code, rows, err = probe(stack.mismatched.metrics_url, "--insecure")
    assert code == 0 and rows[0]["ok"] and rows[0]["tls_verified"] is False, rows
    assert "not verified (--insecure)" in err


def test_probe_of_https_to_a_plain_http_port_is_a_failed_handshake(stack):
    code, rows, err = probe(stack.sim.metrics_url.replace("http:", "https:"), "--ca-file", stack.ca)
    assert code == 1 and rows[0]["error"].startswith("tls-rejected: TLS handshake failed"), rows
    assert "does not speak TLS" in rows[0]["error"]
