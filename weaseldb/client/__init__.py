"""The WeaselDB client library (see docs/client.md)."""
