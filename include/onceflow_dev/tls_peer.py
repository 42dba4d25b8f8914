"""A certificate authority for TLS tests, made here: PEM files for Apache Kafka's own SSL
listener (onceflow_dev.apache_kafka.ssl_listener, which reads PEM) and for the clients
Onceflow makes, with a client key locked by a password and a second CA that signed nothing
of this broker's, so a client trusting it is refused.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    """PEM files: a CA; the server's key and its certificate for `host` (SAN) signed by the
    CA, in one file as Kafka's PEM keystore takes them; a client certificate signed by the CA
    whose key is encrypted with `key_password`; a second CA nobody signed with."""

    ca: Path
    server_keystore: Path
    client_cert: Path
    client_key: Path
    key_password: str
    other_ca: Path


def make_pki(folder: Path, host: str, key_password: str) -> Pki:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def cert(subject, key, issuer, issuer_key, *, ca: bool, san: str | None = None):
        b = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if san:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(san)]), critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    def write(path: Path, data: bytes) -> Path:
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def pem(c) -> bytes:
        return c.public_bytes(serialization.Encoding.PEM)

    def key_pem(k, password: str | None = None) -> bytes:
        enc = (
            serialization.BestAvailableEncryption(password.encode())
            if password
            else serialization.NoEncryption()
        )
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("Onceflow test CA")
    ca = cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = cert(name("Some other CA"), other_key, name("Some other CA"), other_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = cert(name(host), server_key, ca_name, ca_key, ca=False, san=host)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = cert(name("onceflow-client"), client_key, ca_name, ca_key, ca=False)
    return Pki(
        ca=write(folder / "ca.pem", pem(ca)),
        # the key first, then the chain up to the CA
        server_keystore=write(
            folder / "server-keystore.pem", key_pem(server_key) + pem(server) + pem(ca)
        ),
        client_cert=write(folder / "client.pem", pem(client)),
        client_key=write(folder / "client.key", key_pem(client_key, key_password)),
        key_password=key_password,
        other_ca=write(folder / "other-ca.pem", pem(other)),
    )
