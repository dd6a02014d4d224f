"""TLS for a client port, with certificates reloaded in place.

One `ssl.SSLContext` serves the port for its whole life. When the files change (a
cert-manager renewal rewrites the mounted Secret) `reload` loads them into that same
context: OpenSSL copies the context's certificate into each new connection when it is
accepted, so new connections get the new certificate and open ones keep theirs, with no
restart and no connection dropped. A file caught half-written fails to load and the
context keeps what it had; the next check tries again.

A CA bundle for client certificates can be added to but not taken out of a live context
(OpenSSL has no call for it): a CA removed from the bundle still verifies until restart.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path
from typing import Any

from weaseldb.core.config import ConfigError, TlsConfig

log = logging.getLogger("weaseldb.tls")

_VERIFY = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def _contents(paths: list[str]) -> tuple[bytes, ...]:
    """What tells a changed file: its bytes (a few KB, read every `reload_interval_s`). Times
    and sizes can repeat: a renewed certificate has the size of the one before, and a
    rewrite within one clock tick keeps the time."""
    return tuple(Path(path).read_bytes() for path in paths)


class ReloadingTls:
    def __init__(self, config: TlsConfig) -> None:
        self.config = config
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.verify_mode = _VERIFY[config.client_certs]
        self._seen: tuple[bytes, ...] = ()
        try:
            self._load()
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"tls: cannot load {self._files()}: {e}") from e

    def _files(self) -> list[str]:
        files = [self.config.cert_file, self.config.key_file]
        return [*files, self.config.client_ca_file] if self.config.client_ca_file else files

    def _load(self) -> None:
        seen = _contents(self._files())
        # Tried on a scratch context first: a certificate loaded into the live one before
        # its key turns out not to match would leave the port with no usable key.
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
            self.config.cert_file, self.config.key_file
        )
        self.context.load_cert_chain(self.config.cert_file, self.config.key_file)
        if self.config.client_ca_file:
            self.context.load_verify_locations(self.config.client_ca_file)
        self._seen = seen

    def reload(self) -> bool:
        """Load the files again if any changed; True when new ones are in."""
        try:
            if _contents(self._files()) == self._seen:
                return False
            self._load()
        except (OSError, ssl.SSLError) as e:
            log.warning("tls: keeping the certificate loaded before: %s", e)
            return False
        log.info("tls: loaded the changed certificate files")
        return True

    def factory(self, *_: object) -> ssl.SSLContext:
        """uvicorn's `ssl_context_factory`: the one live context."""
        return self.context

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self.config.reload_interval_s)
            self.reload()


def common_name(peercert: Any) -> str | None:
    """The subject's common name of a verified peer certificate (`getpeercert()`: a dict
    whose "subject" is a tuple of RDNs, each a tuple of (name, value) pairs)."""
    subject: tuple[tuple[tuple[str, str], ...], ...] = (peercert or {}).get("subject", ())
    for rdn in subject:
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
