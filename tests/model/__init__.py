"""A reference model of the idempotency protocol, and the faults the model-based test injects."""
