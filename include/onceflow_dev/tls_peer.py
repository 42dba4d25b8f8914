"""A real TLS peer for the broker, for tests: a certificate authority made here, and stunnel
(Debian's stunnel4) terminating TLS in front of a plaintext tansu listener.

tansu's own `--cert` still speaks plaintext (ENVIRONMENT), so TLS clients are tested against
stunnel: the broker advertises the terminator's address, so every connection a client makes
(bootstrap and partition leaders) goes through TLS. With `client_ca` set, stunnel demands a
client certificate signed by that CA (mutual TLS), which the client's key password unlocks.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STUNNEL = "stunnel4"


def available() -> str | None:
    """Why the TLS peer cannot run here, or None."""
    return None if shutil.which(STUNNEL) else "stunnel4 is not installed (make system-deps)"


@dataclass(frozen=True)
class Pki:
    """PEM files: a CA, a server certificate for `host`, a client certificate whose key is
    encrypted with `key_password`, and a second CA nobody signed with."""

    ca: Path
    server_cert: Path
    server_key: Path
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
    now = dt.datetime.now(dt.UTC)

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
        server_cert=write(folder / "server.pem", pem(server)),
        server_key=write(folder / "server.key", key_pem(server_key)),
        client_cert=write(folder / "client.pem", pem(client)),
        client_key=write(folder / "client.key", key_pem(client_key, key_password)),
        key_password=key_password,
        other_ca=write(folder / "other-ca.pem", pem(other)),
    )


@contextlib.contextmanager
def stunnel(folder: Path, port: int, target_port: int, pki: Pki, mutual: bool) -> Iterator[int]:
    """TLS on 127.0.0.1:`port`, forwarded to 127.0.0.1:`target_port`; stopped by PID."""
    conf = folder / "stunnel.conf"
    lines = [
        "foreground = yes",
        f"output = {folder / 'stunnel.log'}",
        "debug = 5",
        "[kafka]",
        f"accept = 127.0.0.1:{port}",
        f"connect = 127.0.0.1:{target_port}",
        f"cert = {pki.server_cert}",
        f"key = {pki.server_key}",
    ]
    if mutual:
        lines += [f"CAfile = {pki.ca}", "verifyChain = yes", "requireCert = yes"]
    conf.write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen(
        [STUNNEL, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                log = folder / "stunnel.log"
                raise RuntimeError(
                    f"stunnel did not start: {log.read_text()[-2000:] if log.exists() else ''}"
                )
            time.sleep(0.05)
        yield port
    finally:
        from onceflow_dev.stack import stop_child

        stop_child(proc)
