"""The broker side of the worker: its job stream (Redis streams with a consumer group), taking over
the jobs of dead workers, and its presence (record and heartbeat)."""
