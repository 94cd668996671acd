"""The openai SDK clients at the edges of a stream (repro/load/clients/openai_client.py, httpx_tap.py):
where `data: [DONE]` falls in the reads, malformed events, answers that are no stream, the hop that
answered an error, rounds abandoned while connecting or as headers arrive, TLS connections, and the
SDK's own retries under --client-timeouts native. Real sockets on 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import threading
import time

import anyio
import pytest

from repro.core import events as ev
from repro.load.driver import Driver, DriverConfig
from repro.load.prompts import PromptSource
from tests.support.hostile import (
    SSE_HEADERS,
    HostileServer,
    chunk,
    headers_then_nothing,
    healthy,
    hostile_server,
    malformed_json,
    respond,
    scripted,
    silent,
    sse,
    token,
)
from tests.support.ports import established_client_ports

pytestmark = pytest.mark.timeout(60)

SDK_CLIENTS = ("openai", "openai-async")


def drive(url: str, *, client: str, rounds: int = 1, **options) -> tuple[list, list[ev.Event]]:
    events: list[ev.Event] = []
    settings = dict(connect_timeout=2.0, round_timeout=10.0, stall_after=2.0) | options
    config = DriverConfig(base_url=url, model="m", rounds=rounds, conversations=1, max_tokens=8, client=client,
                          ramp_up=0.0, **settings)
    driver = Driver(config, PromptSource(prompt_chars=40), events.append)

    async def run():
        with anyio.fail_after(30):
            return await driver.run()

    return anyio.run(run), events


def of(events: list[ev.Event], kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


# --- 1. data: [DONE] is a line of its own, wherever the reads split it ---

async def split_done(reader, writer, index) -> bool:
    writer.write(SSE_HEADERS + token("hello ") + sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}))
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(chunk(b"data: [DO"))
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(chunk(b"NE]\n\n") + chunk(b""))
    await writer.drain()
    return True


async def quoted_done(reader, writer, index) -> bool:
    # The reply quotes the marker; then the body ends cleanly without the real one.
    writer.write(SSE_HEADERS + token("a stream ends with data: [DONE] as its last line") + chunk(b""))
    await writer.drain()
    return True


def test_the_done_line_is_found_split_at_any_byte_and_never_inside_a_line():
    from repro.load.clients.httpx_tap import DoneFinder

    body = b'data: {"choices": []}\n\ndata: [DONE]\n\n'
    for cut in range(len(body) + 1):
        for second_cut in range(cut, len(body) + 1):
            finder = DoneFinder()
            found = [finder.feed(part) for part in (body[:cut], body[cut:second_cut], body[second_cut:])]
            assert found[-1], (cut, second_cut)
    assert DoneFinder().feed(b"data: [DONE]\n\n")  # at the body's start
    assert DoneFinder().feed(b"data:[DONE]\r\n\r\n")  # SSE allows no space
    quoted = DoneFinder()
    assert not quoted.feed(b'data: {"content": "ends with data: [DONE] as') and not quoted.feed(b' its last"}\n\n')


@pytest.mark.network
@pytest.mark.parametrize("client", SDK_CLIENTS)
def test_a_done_marker_split_across_two_reads_completes_the_round(client):
    with hostile_server(split_done) as server:
        outcomes, events = drive(server.url, client=client, rounds=2)
    assert [o.status for o in outcomes] == ["completed", "completed"], [o.error for o in outcomes]
    assert not of(events, ev.RoundFailed)


@pytest.mark.network
@pytest.mark.parametrize("client", SDK_CLIENTS)
def test_a_reply_quoting_the_done_marker_is_not_a_completed_stream(client):
    with hostile_server(quoted_done) as server:
        outcomes, events = drive(server.url, client=client)
    (failed,) = of(events, ev.RoundFailed)
    assert outcomes[0].status == "failed"
    assert (failed.failure, failed.phase, failed.error) == ("truncated", "mid-stream", "stream ended without data: [DONE]")


# --- 2, 3. a malformed event, an answer that is no stream: a failed round, the run goes on ---

async def bad_shape(reader, writer, index) -> bool:
    writer.write(SSE_HEADERS + sse({"choices": "nope"}) + sse(b"[DONE]") + chunk(b""))
    await writer.drain()
    return True


@pytest.mark.network
@pytest.mark.parametrize("client", SDK_CLIENTS)
@pytest.mark.parametrize("behaviour, event", [(malformed_json, 2), (bad_shape, 1)])
def test_a_malformed_event_fails_its_round_as_a_stream_failure(client, behaviour, event):
    with hostile_server(scripted(behaviour, healthy)) as server:
        outcomes, events = drive(server.url, client=client, rounds=2)
    assert [o.status for o in outcomes] == ["failed", "completed"], [o.error for o in outcomes]
    (failed,) = of(events, ev.RoundFailed)
    assert (failed.failure, failed.phase, failed.status) == ("stream", "mid-stream", 200)
    assert failed.error.startswith(f"malformed SSE event #{event}: "), failed.error


@pytest.mark.network
@pytest.mark.parametrize("client", SDK_CLIENTS)
def test_a_200_html_page_is_not_an_sse_stream(client):
    page = respond("200 OK", b"<html><body>a login page</body></html>", "text/html")
    with hostile_server(scripted(page, healthy)) as server:
        outcomes, events = drive(server.url, client=client, rounds=2)
    assert [o.status for o in outcomes] == ["failed", "completed"], [o.error for o in outcomes]
    (failed,) = of(events, ev.RoundFailed)
    assert (failed.failure, failed.phase, failed.status) == ("stream", "mid-stream", 200)
    assert failed.error == ("status 200 but content-type 'text/html', not an SSE stream: is the target an "
                            "OpenAI-compatible base URL?")


# --- 4. the hop that answered an error ---

@pytest.mark.network
@pytest.mark.parametrize("client", SDK_CLIENTS)
def test_an_error_answer_names_its_server_and_via_headers(client):
    gateway = respond("502 Bad Gateway", b"bad gateway", extra="Server: nginx/1.25.3\r\nVia: 1.1 edge-gw\r\n")
    with hostile_server(gateway) as server:
        outcomes, events = drive(server.url, client=client)
    (failed,) = of(events, ev.RoundFailed)
    assert (failed.failure, failed.status, failed.server, failed.via) == ("http", 502, "nginx/1.25.3", "1.1 edge-gw")


# --- 5, 6. a sync SDK thread left behind ---

def anyio_workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("AnyIO worker")]


@pytest.mark.network
def test_a_sync_thread_abandoned_while_connecting_never_sends_its_request():
    # An accept queue of one, filled: the round's SYN is dropped and its connect completes only
    # after the server starts accepting (~2 s, a SYN retransmission), long after the 0.5 s deadline.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.socket()
    filler.setblocking(False)
    try:
        filler.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    received: list[bytes] = []
    accepted = threading.Event()
    stop = threading.Event()

    def serve() -> None:
        time.sleep(1.2)
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.settimeout(2.0)
            try:
                received.append(conn.recv(65536))
            except OSError:
                received.append(b"")
            finally:
                conn.close()
            if len(received) >= 2:  # the filler's, then the round's
                accepted.set()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        outcomes, events = drive(f"http://127.0.0.1:{port}/v1", client="openai", connect_timeout=5.0,
                                 round_timeout=0.5, stall_after=0.4, judge_budget=0.3)
        assert accepted.wait(6.0), "the round's connect never completed"
        deadline = time.monotonic() + 3.0
        while anyio_workers() and time.monotonic() < deadline:
            time.sleep(0.05)
        left = anyio_workers()
    finally:
        stop.set()
        server.join(5)
        filler.close()
        listener.close()
    assert outcomes[0].status == "failed" and "round deadline of 0.5 s passed" in outcomes[0].error
    assert not any(data.startswith(b"POST") for data in received), received
    assert not left, left  # not blocked for its read timeout on a request nobody will read
    assert not of(events, ev.RoundConnected)


@pytest.mark.network
def test_a_sync_round_abandoned_as_its_headers_arrive_closes_its_connection(monkeypatch):
    from repro.core.openai_chunks import ChunkReader
    from repro.load.clients.httpx_tap import Tap
    from repro.load.clients.openai_client import OpenAIFamily
    from repro.load.round import RoundState

    confirm = Tap.confirm

    def abandoned_at_headers(self, extensions):
        confirm(self, extensions)
        self.abandoned = True  # the driver gives up right as the headers arrive

    monkeypatch.setattr(Tap, "confirm", abandoned_at_headers)
    with hostile_server(headers_then_nothing) as server:
        events: list[ev.Event] = []
        config = DriverConfig(base_url=server.url, model="m", client="openai", connect_timeout=2.0,
                              stall_after=0.4, judge_budget=0.3)
        driver = Driver(config, PromptSource(prompt_chars=40), events.append)

        async def one_round():
            with anyio.fail_after(10):
                conversation = OpenAIFamily(driver.hooks, sync=True).conversation(0)
                try:
                    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
                    result = await conversation.stream(body, RoundState(0, 1, driver.now()), ChunkReader())
                    await anyio.sleep(0.3)
                    return result, established_client_ports(server.port)
                finally:
                    await conversation.aclose()

        result, still_open = anyio.run(one_round)
    ours = {int(e.local.rsplit(":", 1)[1]) for e in of(events, ev.RoundConnected)}
    assert result is None and len(ours) == 1
    assert not ours & still_open, still_open  # closed at once, not when the client closes


# --- 7. TLS: the connection is the same one after the handshake ---

def self_signed_certificate(directory) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


@pytest.fixture
def tls_server(tmp_path, monkeypatch):
    import ssl
    from contextlib import contextmanager

    cert, key = self_signed_certificate(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", cert)  # the clients' default contexts trust it
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    @contextmanager
    def serve(behaviour):
        server = HostileServer(behaviour, tls=context).start()
        try:
            yield server
        finally:
            server.stop()

    return serve


@pytest.mark.network
@pytest.mark.parametrize("client", ["httpx", "openai-async"])
def test_a_round_reusing_a_tls_connection_knows_how_long_it_sat_idle(tls_server, client):
    failing = respond("500 Internal Server Error", b"boom")
    with tls_server(scripted(healthy, failing)) as server:
        outcomes, events = drive(server.url, client=client, rounds=2)
    assert [o.status for o in outcomes] == ["completed", "failed"], [o.error for o in outcomes]
    assert [c.reused for c in of(events, ev.RoundConnected)] == [False, True]
    (failed,) = of(events, ev.RoundFailed)
    assert failed.reused and failed.idle_s is not None and 0 <= failed.idle_s < 5, failed


@pytest.mark.network
def test_an_abandoned_sync_sdk_round_over_tls_ends_its_thread(tls_server):
    with tls_server(silent) as server:
        outcomes, events = drive(server.url, client="openai", stall_after=0.4, judge_budget=0.3)
    assert [o.status for o in outcomes] == ["stalled"]
    (abandoned,) = of(events, ev.RoundAbandoned)
    assert abandoned.duration_s < 2.0
    # Its TLS socket was shut down: the thread returned at once, not by its read timeout.
    assert not any(isinstance(e, ev.Note) and "did not end" in e.message for e in events)


# --- 8. the SDK's own retries (native timeouts): a back-off is the client's wait, not a stall ---

too_many = respond("429 Too Many Requests", b'{"error": {"message": "slow down"}}', "application/json",
                   "Retry-After: 2\r\n")


async def hang_up(reader, writer, index) -> bool:
    return False  # closes the connection without an answer


@pytest.mark.network
@pytest.mark.parametrize("client", SDK_CLIENTS)
def test_a_429_the_sdk_retries_after_its_retry_after_is_no_stall(client):
    with hostile_server(scripted(too_many, healthy)) as server:
        outcomes, events = drive(server.url, client=client, client_timeouts="native", stall_after=0.5,
                                 judge_budget=0.3)
        requests = len(server.requests)
    assert [o.status for o in outcomes] == ["completed"], [o.error for o in outcomes]
    assert requests == 2 and not of(events, ev.RoundStalled)
    (retry,) = of(events, ev.ClientRetry)
    assert (retry.attempt, retry.status, retry.error, retry.retry_after_s) == (1, 429, None, 2.0)
    (done,) = of(events, ev.RoundDone)
    assert done.duration_s >= 1.9  # it did wait out the Retry-After


@pytest.mark.network
@pytest.mark.parametrize("client", SDK_CLIENTS)
def test_a_round_the_sdk_finally_fails_fails_with_the_last_status(client):
    unavailable = respond("503 Service Unavailable", b"busy", extra="Retry-After: 0.4\r\n")
    with hostile_server(unavailable) as server:
        outcomes, events = drive(server.url, client=client, client_timeouts="native", stall_after=0.2,
                                 judge_budget=0.3)
    (failed,) = of(events, ev.RoundFailed)
    assert (failed.failure, failed.status) == ("http", 503) and failed.error.startswith("HTTP 503 after 3 attempts")
    assert [(r.attempt, r.status) for r in of(events, ev.ClientRetry)] == [(1, 503), (2, 503)]
    assert not of(events, ev.RoundStalled)


@pytest.mark.network
@pytest.mark.parametrize("client", SDK_CLIENTS)
def test_a_connection_closed_before_headers_is_retried_as_the_clients_wait(client):
    with hostile_server(scripted(hang_up, healthy)) as server:
        outcomes, events = drive(server.url, client=client, client_timeouts="native", stall_after=0.2,
                                 judge_budget=0.3)
    assert [o.status for o in outcomes] == ["completed"], [o.error for o in outcomes]
    (retry,) = of(events, ev.ClientRetry)
    assert retry.status is None and retry.error.startswith("RemoteProtocolError"), retry
    assert not of(events, ev.RoundStalled)


@pytest.mark.network
def test_an_abandoned_sync_round_cuts_the_sdks_back_off_short():
    # Retry-After 20 s, a round deadline of 1 s: the worker thread must not sleep the 20 s out.
    slow_down = respond("429 Too Many Requests", b"{}", "application/json", "Retry-After: 20\r\n")
    with hostile_server(slow_down) as server:
        outcomes, events = drive(server.url, client="openai", client_timeouts="native", round_timeout=1.0,
                                 stall_after=0.5, judge_budget=0.3)
        requests = len(server.requests)
    assert outcomes[0].status == "failed" and "round deadline" in outcomes[0].error
    assert requests == 1 and not of(events, ev.RoundStalled)
    # The deadline passed in the client's own back-off: the client held it (a hop answered 429 first).
    (failed,) = of(events, ev.RoundFailed)
    assert failed.failure == "client-wait" and "back-off after HTTP 429" in failed.error, failed
    assert "never left the client" not in failed.error
    assert not any(isinstance(e, ev.Note) and "did not end" in e.message for e in events)
