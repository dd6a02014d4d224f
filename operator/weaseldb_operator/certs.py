"""The certificates the operator makes itself when `spec.tls.secretName` is not given
(docs/operator.md "Security"), as CloudNativePG does: a self-signed CA per database and a
server certificate it signs for the database's Service names. Pure: bytes in, bytes out,
no Kubernetes; the Secret around them is tlssecrets.py's.

The CA outlives the server certificate: a renewal signs a new server certificate with
the same CA, so clients that trust `ca.crt` keep trusting the database.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: How long a server certificate is valid, and how long before its end it is renewed.
SERVER_VALIDITY = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)
CA_VALIDITY = datetime.timedelta(days=3650)
#: Backdated so a node whose clock is a little behind still accepts a fresh certificate.
CLOCK_SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class Pem:
    """The Secret's three keys (kubernetes.io/tls, plus `ca.crt` as cert-manager writes)."""

    ca_crt: bytes
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes


def dns_names(name: str, namespace: str) -> list[str]:
    """The names a client may dial: the client Service and the readers' Service in every
    form, and the pods by their headless Service (wildcard)."""
    out = []
    for service in (name, f"{name}-readers"):
        out += [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
                f"{service}.{namespace}.svc.cluster.local"]  # fmt: skip
    pods = f"{name}-pods.{namespace}"
    return [*out, f"*.{pods}", f"*.{pods}.svc", f"*.{pods}.svc.cluster.local"]


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def new_authority(name: str, namespace: str, now: datetime.datetime) -> tuple[bytes, bytes]:
    """A self-signed CA for one database: (ca.crt, its key), both PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(f"weaseldb {namespace}/{name} CA")
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def server_certificate(
    name: str, namespace: str, ca_crt: bytes, ca_key: bytes, now: datetime.datetime
) -> tuple[bytes, bytes]:
    """A server certificate for the database's DNS names, signed by the CA: (tls.crt,
    tls.key), PEM; tls.crt carries the CA after the leaf (a full chain)."""
    ca = x509.load_pem_x509_certificate(ca_crt)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    names = dns_names(name, namespace)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[2]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + SERVER_VALIDITY)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .sign(signer, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM) + ca_crt, _key_pem(key)


def issue(
    name: str, namespace: str, now: datetime.datetime, authority: tuple[bytes, bytes] | None
) -> Pem:
    """A server certificate, signed by `authority` (ca.crt, ca.key) when given (a
    renewal), else by a new CA."""
    ca_crt, ca_key = authority or new_authority(name, namespace, now)
    tls_crt, tls_key = server_certificate(name, namespace, ca_crt, ca_key, now)
    return Pem(ca_crt, ca_key, tls_crt, tls_key)


def not_after(tls_crt: bytes) -> datetime.datetime:
    """The end of the first (leaf) certificate of a PEM chain, in UTC."""
    return x509.load_pem_x509_certificate(tls_crt).not_valid_after_utc


def due(tls_crt: bytes, now: datetime.datetime) -> bool:
    """Renew now: within RENEW_BEFORE of the leaf's end, past it, or unreadable."""
    try:
        return now >= not_after(tls_crt) - RENEW_BEFORE
    except ValueError:
        return True
