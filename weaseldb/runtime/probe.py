"""Asking another stage's `/readyz` (weaseldb/runtime/service.py) over HTTP, with aiohttp:
the persister asks the sequencer and the resolver whether they already hold a term before it
announces its first one. The answer is handed back as it came (status and body); what the
body says is its reader's business, so a typed reading of it slots in at the caller."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import aiohttp

#: A stage on this host answers at once or is not up: connecting and then reading the
#: answer may each take this long before the stage counts as not answering.
STEP_TIMEOUT = aiohttp.ClientTimeout(sock_connect=0.5, sock_read=0.5)


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    @property
    def ready(self) -> bool:
        return self.status == 200


def session() -> aiohttp.ClientSession:
    """One session for a run of probes: it keeps the connections between them."""
    return aiohttp.ClientSession(timeout=STEP_TIMEOUT)


class Silence(enum.Enum):
    """Why a stage gave no answer: the two mean different things to a failure detector."""

    REFUSED = "refused"  # nothing listens there (the process is gone) or no route
    TIMED_OUT = "timed out"  # no answer in time: busy, frozen, or cut off


async def ask(http: aiohttp.ClientSession, host: str, port: int) -> Answer | Silence:
    """GET /readyz of the stage at `host:port`, or why there was no answer."""
    try:
        async with http.get(f"http://{host}:{port}/readyz") as response:
            return Answer(response.status, await response.read())
    except TimeoutError:  # aiohttp's own timeouts are TimeoutErrors too
        return Silence.TIMED_OUT
    except (aiohttp.ClientError, OSError):
        return Silence.REFUSED


async def readyz(http: aiohttp.ClientSession, host: str, port: int) -> Answer | None:
    """GET /readyz of the stage at `host:port`; None when it does not answer in time."""
    answer = await ask(http, host, port)
    return answer if isinstance(answer, Answer) else None
