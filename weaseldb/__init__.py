"""WeaselDB shared core: the wire protocol, batch format, object layout, recovery and config.

Modules here are pure (no web framework, transport or cloud SDK) except the adapters
`weaseldb.ring` (sockets on the event loop), `weaseldb.blobstore.s3` (aioboto3),
`weaseldb.service` (FastAPI) and the command line. `make lint` checks that boundary with
import-linter.
"""
