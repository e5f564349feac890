"""The manager's Celery application: long control-plane operations (archive download and unpacking,
unregistering) run as tasks on the same Redis (keys under :data:`sluice.redis.keys.CELERY_PREFIX`), never
anything of the inference path.

A message carries only an operation id (JSON; pickle is refused): the operation itself is a record in
Redis (:mod:`sluice_manager.stores.operations`), so a redelivered message finds it finished and does nothing.
Settings follow the Celery-on-Redis caveats (reliability_security.md section 3.7): late acks, requeue
on a lost worker process, a visibility timeout above the longest task and a hard time limit below
it, and a retry cap kept in the operation record (``max_attempts``).
"""

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from celery import Celery
from sluice.redis import keys
from sluice.redis.target import is_cluster, is_sentinel, parse_sentinel_url

from sluice_manager.operations import cluster_transport

TASK_NAME = "sluice.run_operation"
QUEUE = "sluice-control"


def broker_url(redis_url: str) -> str:
    """Celery's spelling of ``redis_url``: kombu reads a unix socket only as ``redis+socket://``
    (database in ``virtual_host``), Sentinels as ``sentinel://...;sentinel://...`` (the master's
    name in :func:`transport_options`) and a Cluster through Sluice's transport
    (:mod:`~sluice_manager.operations.cluster_transport`); other URLs are the same for both."""
    if is_cluster(redis_url):
        return cluster_transport.broker_url(redis_url)
    if is_sentinel(redis_url):
        target = parse_sentinel_url(redis_url)
        credentials = f":{quote(target.password, safe='')}@" if target.password else ""
        nodes = (f"sentinel://{credentials}{host}:{port}/{target.db}" for host, port in target.sentinels)
        return ";".join(nodes)
    parts = urlsplit(redis_url)
    if parts.scheme != "unix":
        return redis_url
    query = parse_qs(parts.query)
    db = query.get("db", ["0"])[0]
    password = unquote(parts.password or "") or query.get("password", [""])[0]
    username = unquote(parts.username or "") or query.get("username", [""])[0]
    credentials = f"{quote(username, safe='')}:{quote(password, safe='')}@" if password else ""
    return f"redis+socket://{credentials}{parts.path}?virtual_host={db}"


def transport_options(redis_url: str, visibility_timeout_s: float) -> dict[str, object]:
    options: dict[str, object] = {
        "visibility_timeout": visibility_timeout_s,
        "global_keyprefix": keys.CELERY_PREFIX,
    }
    if is_cluster(redis_url):
        options["cluster_url"] = redis_url
    if is_sentinel(redis_url):
        target = parse_sentinel_url(redis_url)
        options["master_name"] = target.master
        if target.sentinel_password:
            options["sentinel_kwargs"] = {"password": target.sentinel_password}
    return options


def celery_app(redis_url: str, *, visibility_timeout_s: float) -> Celery:
    app = Celery("sluice_manager", broker=broker_url(redis_url), set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # A task never outlives the visibility timeout (it would be delivered a second time).
        task_time_limit=max(1, int(visibility_timeout_s * 0.9)),
        task_default_queue=QUEUE,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        worker_enable_remote_control=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options=transport_options(redis_url, visibility_timeout_s),
    )
    return app


def register_task(app: Celery, run: Callable[[str], None]) -> Any:
    """The task that runs operation ``op_id`` (``run`` must be idempotent)."""

    def run_operation(op_id: str) -> None:
        run(op_id)

    return app.task(name=TASK_NAME, acks_late=True, reject_on_worker_lost=True)(run_operation)


def submit(app: Celery, op_id: str) -> None:
    """Queue operation ``op_id`` (blocking: call it from a thread)."""
    app.send_task(TASK_NAME, args=[op_id], queue=QUEUE)
