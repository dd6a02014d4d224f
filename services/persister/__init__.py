"""Persister: the only writer of batches; releases answers strictly in batch order."""
