"""WeaselDB's shared ground floor, in two layers.

- `weaseldb.core`: pure logic — the wire protocol, batch format, object layout, recovery,
  validity, fold, request ids, GC, configuration. No web framework, transport, cloud SDK or
  process runtime; everything above may use it.
- `weaseldb.runtime`: the process runtime the services share — the service kit (FastAPI and
  uvicorn), the socket ring and relay, the supervisor, tracing, the version cell and the
  object-store implementations. It uses the core, never the reverse.

Neither imports a service, the operator, the Spark job or the command line (`weaseldb_cli`);
`make lint` checks the layers with import-linter.
"""
