"""The one TLS context builder (repro/io/tls.py): what it trusts, and how it names a refused handshake
from the exceptions each library wraps around the ssl module's. No socket: the handshakes
themselves are tested on nginx (tests/live/test_tls_stacks.py)."""

from __future__ import annotations

import ssl

import aiohttp
import httpx
import pytest
from aiohttp.client_reqrep import ConnectionKey

from repro.io.tls import Trust, check_ca_file, client_context, rejection
from tests.support.tls import Pki


def verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message}")
    error.verify_code, error.verify_message = code, message
    return error


@pytest.mark.parametrize(("code", "message", "reason"), [
    (20, "unable to get local issuer certificate", "unknown-ca"),
    (18, "self-signed certificate", "unknown-ca"),
    (19, "self-signed certificate in certificate chain", "unknown-ca"),
    (62, "Hostname mismatch, certificate is not valid for 'a.example'.", "name-mismatch"),
    (64, "IP address mismatch, certificate is not valid for '127.0.0.1'.", "name-mismatch"),
    (10, "certificate has expired", "expired"),
    (9, "certificate is not yet valid", "not-yet-valid"),
])
def test_each_verification_failure_is_named_through_each_librarys_wrapper(code, message, reason):
    error = verify_error(code, message)
    key = ConnectionKey("127.0.0.1", 443, True, True, None, None, None)
    wrapped_by_aiohttp = aiohttp.ClientConnectorCertificateError(key, error)
    try:  # httpx raises its ConnectError from httpcore's, from the ssl module's
        try:
            raise error
        except ssl.SSLError as inner:
            raise httpx.ConnectError(str(inner)) from inner
    except httpx.ConnectError as exc:
        wrapped_by_httpx = exc
    for exc in (error, wrapped_by_aiohttp, wrapped_by_httpx):
        found = rejection(exc)
        assert found is not None and found.reason == reason, (exc, found)
        assert message[:20] in found.detail and found.text.startswith("tls-rejected: ")


def test_tls_to_a_plain_http_port_is_a_failed_handshake_and_a_refusal_is_no_tls_failure():
    wrong = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    wrong.reason = "WRONG_VERSION_NUMBER"
    assert rejection(httpx.ConnectError("[Errno 111] Connection refused")) is None
    found = rejection(wrong)
    assert found is not None and found.reason == "handshake" and "plain-HTTP" in found.detail
    assert rejection(ConnectionRefusedError(111, "Connection refused")) is None
    assert rejection(ssl.SSLEOFError(8, "EOF occurred in violation of protocol")) is None  # a close, not a refusal


def test_the_context_trusts_the_ca_file_and_ssl_cert_file_and_insecure_checks_nothing(tmp_path, monkeypatch):
    pki = Pki.create(tmp_path)
    subject = "repro test CA"

    def trusts_our_ca(context: ssl.SSLContext) -> bool:
        return any(dict(field[0] for field in ca["subject"]).get("commonName") == subject
                   for ca in context.get_ca_certs())

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    assert not trusts_our_ca(client_context(Trust()))
    with_file = client_context(Trust(ca_file=str(pki.ca)))
    assert trusts_our_ca(with_file) and with_file.verify_mode == ssl.CERT_REQUIRED and with_file.check_hostname
    assert client_context(Trust(ca_file=str(pki.ca))) is with_file  # built once
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    assert trusts_our_ca(client_context(Trust()))  # OpenSSL's own variable, read when the context is built
    insecure = client_context(Trust(insecure=True))
    assert insecure.verify_mode == ssl.CERT_NONE and not insecure.check_hostname


def test_a_ca_file_that_is_not_one_is_named(tmp_path):
    assert check_ca_file(str(tmp_path / "missing.pem")) == "no such file"
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    assert check_ca_file(str(junk)).startswith("not a PEM CA certificate")
    assert check_ca_file(str(Pki.create(tmp_path / "pki").ca)) is None
