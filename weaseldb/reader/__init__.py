"""The reader: a queryable copy of the database, fed by the change stream (see docs/reader.md)."""
