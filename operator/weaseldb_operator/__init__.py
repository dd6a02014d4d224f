"""WeaselDB Kubernetes operator (kopf)."""
