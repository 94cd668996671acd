"""The TLS trust of every client of ours, built in one place: the driver's clients (aiohttp, httpx,
the openai SDK), the probes, the canaries, model discovery and the deployment record.

What is trusted: the system's CA store as OpenSSL finds it, which honours `SSL_CERT_FILE` and
`SSL_CERT_DIR` (OpenSSL's own variables, read by `ssl.create_default_context`), plus the CA file
given with `--ca-file` (added to the store, not replacing it: a stack may mix a private CA in front
with public certificates elsewhere). `--insecure` checks no certificate and no name. httpx's own
default (certifi's bundle alone, and `SSL_CERT_FILE` only with `trust_env`, which we turn off so no
`HTTPS_PROXY` adds a hop) is not used anywhere: one trust for every connection we open.

The trust is process-wide, like `SSL_CERT_FILE` itself: a command sets it once (`use_trust`)
before any client exists, and every client in the process builds from it; the driver's clients
also carry it in their options, so a worker process of `--workers` gets the same.

`rejection(exc)` says why a handshake failed, from the ssl exception a library wraps (aiohttp,
httpx, httpx2): the certificate's issuer is unknown, its name does not match, it expired, or the
handshake itself failed (e.g. TLS spoken to a plain-HTTP port).
"""

from __future__ import annotations

import functools
import os
import ssl
from dataclasses import dataclass

from repro.core.kinds import TLS_REASON_WORDS, TlsReason

# OpenSSL's X509_V_ERR_* codes (openssl/x509_vfy.h), as ssl.SSLCertVerificationError.verify_code.
_UNKNOWN_CA = {2, 18, 19, 20, 21}  # issuer not found, self-signed leaf, self-signed root in chain, not trusted here
_EXPIRED = {10, 12}  # the certificate (or a CRL) has expired
_NOT_YET_VALID = {9, 11}
_NAME_MISMATCH = {62, 63, 64}  # hostname, email, IP address



@dataclass(frozen=True)
class Trust:
    """Which certificates our clients accept: see the module's docstring."""

    ca_file: str | None = None
    insecure: bool = False


_process_trust = Trust()


def use_trust(trust: Trust) -> None:
    """Set the process's trust: called once by a command, before any client is made."""
    global _process_trust
    _process_trust = trust


def process_trust() -> Trust:
    return _process_trust


def client_context(trust: Trust | None = None) -> ssl.SSLContext:
    """The TLS context for `trust` (default: the process's). Built once per trust and CA variables:
    loading the CA store costs tens of milliseconds, on the event loop, and every stall sends a
    wave of canaries; an SSLContext is safe to share between connections."""
    trust = trust or _process_trust
    return _context(trust, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.cache
def _context(trust: Trust, cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context()  # the system store; OpenSSL reads SSL_CERT_FILE / SSL_CERT_DIR
    if trust.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if not cert_file and not cert_dir and not context.cert_store_stats().get("x509_ca"):
        # A system without a CA store (a slim container): certifi's bundle, as httpx would use.
        import certifi

        context.load_verify_locations(cafile=certifi.where())
    if trust.ca_file:
        context.load_verify_locations(cafile=trust.ca_file)
    return context


def check_ca_file(path: str) -> str | None:
    """Why `path` cannot serve as a CA file (missing, unreadable, no PEM certificate), or None."""
    if not os.path.isfile(path):
        return "no such file"
    try:
        ssl.create_default_context(cafile=path)
    except (ssl.SSLError, OSError) as exc:
        return f"not a PEM CA certificate ({exc.strerror or exc})"
    return None


@dataclass(frozen=True)
class Rejection:
    reason: TlsReason
    detail: str  # OpenSSL's words

    @property
    def text(self) -> str:
        return f"tls-rejected: {TLS_REASON_WORDS[self.reason]} ({self.detail})"


def rejection(exc: BaseException) -> Rejection | None:
    """Why a connection failed in its TLS handshake, found in the chain of exceptions a library
    wrapped around the ssl module's; None when the failure was no TLS failure."""
    found = _ssl_error(exc)
    if found is None:
        return None
    if isinstance(found, ssl.SSLCertVerificationError):
        code = found.verify_code
        detail = " ".join(str(found.verify_message or found.reason or found).split())[:200]
        reason: TlsReason = ("unknown-ca" if code in _UNKNOWN_CA else "name-mismatch" if code in _NAME_MISMATCH
                  else "expired" if code in _EXPIRED else "not-yet-valid" if code in _NOT_YET_VALID
                  else "handshake")
        return Rejection(reason, detail)
    detail = " ".join(str(found.reason or found.strerror or found).split())[:200]
    if detail.upper() == "WRONG_VERSION_NUMBER":
        detail += ": the peer does not speak TLS (a plain-HTTP port?)"
    return Rejection("handshake", detail)


def _ssl_error(exc: BaseException) -> ssl.SSLError | None:
    seen: set[int] = set()
    stack: list[object] = [exc]
    while stack:
        current = stack.pop()
        if not isinstance(current, BaseException) or id(current) in seen:
            continue
        seen.add(id(current))
        # The ssl module's own error: aiohttp's wrappers subclass ssl.CertificateError without its fields.
        if (isinstance(current, ssl.SSLError) and type(current).__module__ == "ssl"
                and not isinstance(current, ssl.SSLZeroReturnError | ssl.SSLEOFError)):
            return current
        # aiohttp keeps the ssl error in an attribute; anyio's happy eyeballs in a group.
        stack += [current.__cause__, current.__context__, getattr(current, "certificate_error", None),
                  getattr(current, "os_error", None), *getattr(current, "exceptions", ()), *current.args]
    return None
