"""Gateway: the client API. Validates, hands commits to the ring, answers from the persister."""
