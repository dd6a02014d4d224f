"""Certificates for TLS tests, made with the openssl command line: a CA, server
certificates for 127.0.0.1 and client certificates, laid out like a cert-manager Secret
(``tls.crt``, ``tls.key``, ``ca.crt``)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


class Authority:
    """A self-signed CA in `folder` that issues leaf certificates."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.ca = folder / "ca.crt"
        self._key = folder / "ca.key"
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=weaseldb-test-ca", "-keyout", str(self._key), "-out", str(self.ca),
            cwd=folder,
        )  # fmt: skip

    def issue(self, name: str, *, server: bool) -> Pair:
        """A leaf for CN=`name`; a server one names 127.0.0.1 and localhost."""
        key, csr, cert = (self.folder / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        extensions = self.folder / f"{name}.ext"
        usage = "serverAuth" if server else "clientAuth"
        lines = [f"extendedKeyUsage={usage}"]
        if server:
            lines.append("subjectAltName=IP:127.0.0.1,DNS:localhost")
        extensions.write_text("\n".join(lines) + "\n")
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", str(key), "-out", str(csr), cwd=self.folder,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self._key),
            "-CAcreateserial", "-days", "2", "-extfile", str(extensions), "-out", str(cert),
            cwd=self.folder,
        )  # fmt: skip
        return Pair(cert, key)
