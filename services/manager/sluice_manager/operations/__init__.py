"""Long control-plane operations run as Celery tasks in a child process of the manager, with their
records and the per-model lock."""
