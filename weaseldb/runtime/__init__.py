"""The process runtime the services share, above the pure core (see `weaseldb`)."""
