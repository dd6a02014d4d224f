"""WeaselDB compaction job (PySpark)."""
