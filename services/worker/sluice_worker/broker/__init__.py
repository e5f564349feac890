"""The broker side of the worker, the only part of it besides ``app`` that knows Redis
(``scripts/check_boundaries.py``): its job stream (Redis streams with a consumer group), taking over
the jobs of dead workers, its presence (record and heartbeat), what it starts from (the version
record, the manager's artifact endpoint) and waiting out Redis outages (``retries``)."""
