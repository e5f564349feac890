"""Keeping every model version's workers running: the reconcile loop and its pure policy, worker state
in Redis, the reconcile lease, and the launchers that start and stop workers."""
