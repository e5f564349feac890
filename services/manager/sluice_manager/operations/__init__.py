"""Long control-plane operations run as Celery tasks in a child process of the manager (their records
and the per-model lock are in :mod:`sluice_manager.stores`)."""
