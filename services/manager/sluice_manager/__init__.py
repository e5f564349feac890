"""Sluice's manager: the model registry in Redis, safe archive unpacking, the launcher that runs
workers, and the reconcile loop that keeps each model version's workers between min and max."""
