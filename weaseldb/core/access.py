"""Who may do what on the client API (pure: no framework, no I/O).

Modelled on etcd's role-based access over key ranges: each *grant* names a bearer token
or a client certificate's subject, the actions it allows (``commit``, ``status``,
``subscribe``, and ``read`` on a reader) and the key prefixes it may touch. A commit is
allowed when every key it writes, deletes, range-deletes or reads in a precondition lies
inside one of the grant's prefixes (a range must fit inside one prefix whole); a change
stream, or a reader's read, when its keys lie inside one prefix. The gateway asks these
rules before a commit enters the pipeline, so a refused commit has nothing applied.

The grants file (``auth.grants_file``, a mounted Secret) is TOML::

    [[grant]]
    name = "billing"                 # for logs and error messages
    token = "s3cr3t"                 # a bearer token ...
    # subject = "billing-client"     # ... or a client certificate's common name (mTLS)
    actions = ["commit", "status", "subscribe", "read"]   # the default: all four
    prefixes = ["billing/"]          # UTF-8 key prefixes; "" is every key (the default)

Several grants may carry the same name (a token being rotated: add the new one, roll the
clients, remove the old one).
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from weaseldb.core.changes import KeyFilter, prefix_end
from weaseldb.core.errors import Forbidden
from weaseldb.core.protocol import Operation, PointRead, Precondition, RangeDelete, point_range

COMMIT, STATUS, SUBSCRIBE, READ = "commit", "status", "subscribe", "read"
ACTIONS = frozenset({COMMIT, STATUS, SUBSCRIBE, READ})


class AccessDenied(Forbidden):
    """The grant does not allow this request: 403 forbidden, as any `Forbidden`."""


@dataclass(frozen=True)
class Grant:
    name: str
    actions: frozenset[str]
    prefixes: tuple[bytes, ...]

    def allows(self, action: str) -> bool:
        return action in self.actions

    @cached_property
    def _bounds(self) -> tuple[tuple[bytes, bytes | None], ...]:
        # Each prefix with the first key after it, worked out once per grant, not per key.
        return tuple((prefix, prefix_end(prefix)) for prefix in self.prefixes)

    def covers(self, begin: bytes, end: bytes | None) -> bool:
        """Whether `[begin, end)` (end None: no upper bound) lies inside one prefix."""
        for prefix, limit in self._bounds:
            inside_top = limit is None or (end is not None and end <= limit)
            if begin.startswith(prefix) and inside_top:
                return True
        return False

    def describe(self) -> str:
        shown = ", ".join(repr(p.decode("utf-8", "backslashreplace")) for p in self.prefixes)
        return f"grant {self.name!r} (prefixes {shown})"


def _ranges(
    preconditions: Iterable[Precondition], operations: Iterable[Operation]
) -> Iterable[tuple[str, bytes, bytes]]:
    for i, p in enumerate(preconditions):
        if isinstance(p, PointRead):
            yield f"preconditions[{i}]", *point_range(p.key)
        else:
            yield f"preconditions[{i}]", p.begin, p.end
    for i, op in enumerate(operations):
        if isinstance(op, RangeDelete):
            yield f"operations[{i}]", op.begin, op.end
        else:
            yield f"operations[{i}]", *point_range(op.key)


def check_commit(
    grant: Grant, preconditions: Iterable[Precondition], operations: Iterable[Operation]
) -> None:
    """AccessDenied, naming the first item outside the grant, unless all lie inside."""
    if not grant.allows(COMMIT):
        raise AccessDenied(f"{grant.describe()} does not allow commit")
    for where, begin, end in _ranges(preconditions, operations):
        if not grant.covers(begin, end):
            raise AccessDenied(f"{where}: outside the prefixes of {grant.describe()}")


def check_status(grant: Grant) -> None:
    if not grant.allows(STATUS):
        raise AccessDenied(f"{grant.describe()} does not allow status")


def check_subscribe(grant: Grant, keys: KeyFilter | None) -> None:
    """A stream must be filtered to keys inside one prefix (unfiltered: the grant must
    cover every key, the prefix "")."""
    if not grant.allows(SUBSCRIBE):
        raise AccessDenied(f"{grant.describe()} does not allow subscribe")
    begin, end = (b"", None) if keys is None else (keys.begin, keys.end)
    if not grant.covers(begin, end):
        raise AccessDenied(
            f"the stream's keys are outside {grant.describe()}: subscribe with a prefix "
            "(or begin/end) inside one of them"
        )


def check_read(grant: Grant, begin: bytes, end: bytes | None) -> None:
    """A reader's point read (`[key, key + 0x00)`) or range read (end None: unbounded)."""
    if not grant.allows(READ):
        raise AccessDenied(f"{grant.describe()} does not allow read")
    if not grant.covers(begin, end):
        raise AccessDenied(f"the keys read are outside {grant.describe()}")


def token_digest(token: str | bytes) -> bytes:
    """Grants are looked up by the SHA-256 of the token: a dict lookup on a digest says
    nothing, by its timing, about how much of a guessed token was right."""
    return hashlib.sha256(token.encode() if isinstance(token, str) else token).digest()


@dataclass(frozen=True)
class Grants:
    by_token: dict[bytes, Grant]  # token_digest(token) -> grant
    by_subject: dict[str, Grant]  # client certificate common name -> grant

    def for_token(self, token: str | bytes) -> Grant | None:
        return self.by_token.get(token_digest(token))

    def for_subject(self, subject: str) -> Grant | None:
        return self.by_subject.get(subject)


def merged(first: Grants, second: Grants) -> Grants:
    """The grants of two files (the user's and the operator's, `auth.internal_grants_file`);
    a token or subject in both keeps `first`'s grant."""
    return Grants(second.by_token | first.by_token, second.by_subject | first.by_subject)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, else None."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def parse_grants(text: str) -> Grants:
    """The grants of a grants file; ValueError naming the grant and field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"not valid TOML: {e}") from e
    unknown = set(data) - {"grant"}
    if unknown:
        raise ValueError(f"unknown top-level keys {sorted(unknown)} (only [[grant]] tables)")
    by_token: dict[bytes, Grant] = {}
    by_subject: dict[str, Grant] = {}
    for i, entry in enumerate(data.get("grant", [])):
        token, subject, grant = _grant(entry, f"grant[{i}]")
        if token is not None:
            if token_digest(token) in by_token:
                raise ValueError(f"grant[{i}]: the same token is given twice")
            by_token[token_digest(token)] = grant
        if subject is not None:
            if subject in by_subject:
                raise ValueError(f"grant[{i}]: subject {subject!r} is given twice")
            by_subject[subject] = grant
    return Grants(by_token, by_subject)


def _grant(entry: object, where: str) -> tuple[str | None, str | None, Grant]:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: must be a table")
    unknown = set(entry) - {"name", "token", "subject", "actions", "prefixes"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    token, subject = entry.get("token"), entry.get("subject")
    for field, value in (("token", token), ("subject", subject)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"{where}.{field}: must be a non-empty string")
    if token is None and subject is None:
        raise ValueError(f"{where}: needs a token or a subject")
    actions = entry.get("actions", sorted(ACTIONS))
    if not isinstance(actions, list) or not set(actions) <= ACTIONS:
        raise ValueError(f"{where}.actions: a list of {sorted(ACTIONS)}")
    prefixes = entry.get("prefixes", [""])
    if not isinstance(prefixes, list) or not all(isinstance(p, str) for p in prefixes):
        raise ValueError(f"{where}.prefixes: a list of strings")
    name = str(entry.get("name", subject or f"grant-{where}"))
    grant = Grant(name, frozenset(actions), tuple(p.encode() for p in prefixes))
    return (token.strip() if token else None), subject, grant
