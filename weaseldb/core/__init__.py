"""Pure logic: no framework, transport, cloud SDK or process runtime (see `weaseldb`)."""
