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

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from repro.lab.stacks import nginx

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


def tls_nginx(upstream: str, certificate: Certificate, workdir: Path):
    """nginx (repro.lab.stacks.nginx) terminating TLS on 127.0.0.1 with `certificate`, proxying to
    plain-HTTP `upstream`, its stub_status at https://.../nginx_status. Raises StackUnavailable when
    nginx is not installed."""
    return nginx(upstream, workdir, tls=(certificate.cert, certificate.key))
