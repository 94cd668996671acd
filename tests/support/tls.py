"""A private CA and its certificates for tests, and nginx terminating TLS with one of them.

    pki = Pki.create(tmp_path)                  # ca.pem: a CA no system trusts
    cert = pki.issue("good")                    # valid for 127.0.0.1 and localhost
    cert = pki.issue("other", names=["engine.internal"])    # a name mismatch on 127.0.0.1
    cert = pki.issue("old", expired=True)       # expired an hour ago
    with tls_nginx(sim.url, cert, tmp_path) as proxy: proxy.url  # https://127.0.0.1:PORT

Made with the `cryptography` package (installed with mitmproxy, a dependency of repro): the
same OpenSSL an `openssl req -x509` would drive, without a subprocess per certificate. ECDSA
P-256 keys: fast to make, and accepted by every client we test.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from repro.lab.stacks import Proxy, StackUnavailable, free_port, wait_listening, which

LOCAL_NAMES = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class Certificate:
    cert: Path  # PEM
    key: Path  # PEM, unencrypted


@dataclass
class Pki:
    folder: Path
    ca: Path  # the CA's certificate (PEM): what --ca-file and SSL_CERT_FILE are given
    _key: ec.EllipticCurvePrivateKey
    _cert: x509.Certificate

    @classmethod
    def create(cls, folder: Path, name: str = "repro test CA") -> Pki:
        folder.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False, data_encipherment=False,
                                             key_agreement=False, encipher_only=False, decipher_only=False),
                               critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        ca = folder / "ca.pem"
        ca.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(folder, ca, key, cert)

    def issue(self, stem: str, *, names: tuple[str, ...] | list[str] = LOCAL_NAMES, expired: bool = False) -> Certificate:
        """A server certificate signed by this CA, for `names` (IP addresses and DNS names)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start, end = ((now - datetime.timedelta(days=3), now - datetime.timedelta(hours=1)) if expired
                      else (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1)))
        alt = [x509.IPAddress(ipaddress.ip_address(n)) if n.replace(".", "").isdigit() else x509.DNSName(n)
               for n in names]
        ski = self._cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
                .issuer_name(self._cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName(alt), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
                .sign(self._key, hashes.SHA256()))
        paths = Certificate(self.folder / f"{stem}.pem", self.folder / f"{stem}.key")
        paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        paths.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
        return paths


@contextlib.contextmanager
def tls_nginx(upstream: str, certificate: Certificate, workdir: Path) -> Iterator[Proxy]:
    """nginx terminating TLS on 127.0.0.1 with `certificate`, proxying to plain-HTTP `upstream`
    (the SSE settings of repro.lab.stacks.nginx), its stub_status at https://.../nginx_status.
    Raises StackUnavailable when nginx is not installed."""
    binary = which("nginx")
    if binary is None:
        raise StackUnavailable("nginx is not installed (Debian package nginx)")
    prefix = workdir / "nginx-tls"
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = prefix / "nginx.conf"
    temp = " ".join(f"{kind}_temp_path {prefix}/tmp/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf.write_text(f"""
worker_processes 1;
user root;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    {temp}
    upstream engine {{ server {urlsplit(upstream).netloc}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {certificate.cert};
        ssl_certificate_key {certificate.key};
        location = /nginx_status {{ stub_status; }}
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 60s;
        }}
    }}
}}
""")
    log = prefix / "nginx.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([binary, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"], stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=prefix,
                                   start_new_session=True)
    proxy = Proxy("nginx", process, f"https://127.0.0.1:{port}", f"https://127.0.0.1:{port}/nginx_status", prefix)
    try:
        wait_listening(port, process, "nginx (TLS)", log)
        yield proxy
    finally:
        proxy.stop()
