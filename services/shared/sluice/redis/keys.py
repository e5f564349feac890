"""Every Redis key, stream, group and channel Sluice uses, on one screen.

Keys of one model version share the hash tag ``{name:version}`` so that a Redis Cluster keeps them in
one slot (the enqueue script touches several of them atomically). A gateway's keys share ``{gw:id}``.
Model names and versions are validated (:mod:`sluice.registry.names`) before they reach this module, so they
never contain ``{``, ``}`` or ``:``.
"""

PREFIX = "sluice"

# Consumer group every worker of a model version reads the job stream through.
JOB_GROUP = "workers"

# Registry events (model registered/unregistered, default changed) for gateway cache invalidation.
EVENTS_CHANNEL = f"{PREFIX}:events"

# Sorted set of registered model names (score 0: ZRANGE gives name order for ListModels).
MODELS = f"{PREFIX}:models"

# Hash workflow name -> its record (sluice.registry.workflows.WorkflowRecord, JSON).
WORKFLOWS = f"{PREFIX}:workflows"

# Hash region name -> a registered system shared-memory region (sluice.kserve.shared_memory.Region,
# JSON): every gateway of the cluster sees the regions a client registered through any of them.
SHARED_MEMORY_REGIONS = f"{PREFIX}:shm-regions"


def _version_tag(model: str, version: str) -> str:
    return f"{PREFIX}:{{{model}:{version}}}"


def version_prefix(model: str, version: str) -> str:
    """What every key of one model version starts with (scripts derive per-worker keys from it)."""
    return _version_tag(model, version)


def model(name: str) -> str:
    """Hash of one model: ``default`` -> default version, ``v:<version>`` -> registration order."""
    return f"{PREFIX}:model:{name}"


def version_config(model: str, version: str) -> str:
    """Hash holding a model version's record (see :mod:`sluice.registry.records`)."""
    return f"{_version_tag(model, version)}:config"


def job_stream(model: str, version: str) -> str:
    """Stream of jobs for one model version, read through :data:`JOB_GROUP`."""
    return f"{_version_tag(model, version)}:jobs"


def dead_letters(model: str, version: str) -> str:
    """Stream of jobs that exhausted their deliveries (capped)."""
    return f"{_version_tag(model, version)}:dlq"


def workers(model: str, version: str) -> str:
    """Hash worker id -> JSON worker record, for workers that announced READY."""
    return f"{_version_tag(model, version)}:workers"


def heartbeat(model: str, version: str, worker_id: str) -> str:
    """Key that exists (with a TTL) while the worker is alive."""
    return f"{_version_tag(model, version)}:hb:{worker_id}"


def cancel(model: str, version: str, job_id: str) -> str:
    """Flag set (with a TTL) when the client of a job gave up."""
    return f"{_version_tag(model, version)}:cancel:{job_id}"


# How long a closed (ended, idle, timed out) sequence's hash outlives it, so that a request for it is
# told it was closed rather than starting it again unasked.
CLOSED_SEQUENCE_MEMORY_MS = 10 * 60 * 1000


def sequence(model: str, version: str, sequence_id: str) -> str:
    """Hash of one sequence of a stateful version: its holder (worker id, "" while unassigned), when
    it was last used, whether it ended, how many requests it served and its saved state. Outlives
    the sequence for a while, so a request for a closed or expired sequence is told so."""
    return f"{_version_tag(model, version)}:sequence:{sequence_id}"


def sequence_jobs(model: str, version: str, sequence_id: str) -> str:
    """Stream of one sequence's jobs, in arrival order, read by its holder (no consumer group: a job
    leaves it once answered, so whoever holds the sequence next finds the unanswered ones)."""
    return f"{_version_tag(model, version)}:sequence-jobs:{sequence_id}"


def live_sequences(model: str, version: str) -> str:
    """Sorted set sequence id -> when it idles out (ms): the version's live sequences, counted
    against its limit."""
    return f"{_version_tag(model, version)}:sequences"


def held_sequences(model: str, version: str, worker_id: str) -> str:
    """Set of the sequences a worker holds ("" as worker id: sequences no worker holds yet)."""
    return f"{_version_tag(model, version)}:held:{worker_id}"  # enqueue_sequence.lua builds it too


def sequence_holders(model: str, version: str) -> str:
    """Set of the worker ids that hold (or held) sequences: where a rescuer looks for dead holders."""
    return f"{_version_tag(model, version)}:holders"


def sequence_inbox(model: str, version: str, worker_id: str) -> str:
    """Stream telling a worker the sequences just given to it (it blocks reading it with their jobs)."""
    return f"{_version_tag(model, version)}:inbox:{worker_id}"


def batch_sizes(model: str, version: str) -> str:
    """Hash batch size -> number of handler calls of that size (workers HINCRBY it per batch)."""
    return f"{_version_tag(model, version)}:batch-sizes"


def reply_stream(gateway_id: str) -> str:
    """A gateway's own reply stream; workers XADD results to it with NOMKSTREAM."""
    return f"{PREFIX}:{{gw:{gateway_id}}}:replies"


def gateway_alive(gateway_id: str) -> str:
    return f"{PREFIX}:{{gw:{gateway_id}}}:alive"


# Counter that hands out worker ids ("9000", "9001", ... as TorchServe numbers its workers).
WORKER_SEQ = f"{PREFIX}:worker-seq"
FIRST_WORKER_ID = 9000

# Manager-owned state (only managers and `sluice stop` touch it).
# Lease of the manager that runs the reconcile loop: several managers may share one Redis.
MANAGER_LEASE = f"{PREFIX}:manager:lease"
# Hash worker id -> launch record (JSON) of each worker a launcher started: pid, host, log file.
LAUNCHED_WORKERS = f"{PREFIX}:manager:launched"
# Hash "<model>:<version>" -> the autoscaler's state (JSON: the desired worker count and its
# timers); the manager writes it, gateways export the desired count as a metric.
SCALING = f"{PREFIX}:manager:scaling"
# Hash "<model>:<version>" -> restart streak (JSON) behind the restart backoff.
RESTARTS = f"{PREFIX}:manager:restarts"
# The id labelling this cluster's worker containers (see sluice_manager.supervision.cluster).
CLUSTER_ID = f"{PREFIX}:manager:cluster-id"
# Where workers fetch model artifacts (the lease-holding manager's artifact endpoint), and the
# bearer token that endpoint wants (made by the first manager; workers read it here).
ARTIFACT_URL = f"{PREFIX}:manager:artifact-url"
ARTIFACT_TOKEN = f"{PREFIX}:manager:artifact-token"
# The manager's startup report (records.StartupReport); `sluice start` waits on it.
STARTUP_REPORT = f"{PREFIX}:manager:startup"


def model_lock(model: str) -> str:
    """Per-model lock of the management API (register/unregister/scale/set-default of one model)."""
    return f"{PREFIX}:manager:lock:{model}"


def operation(op_id: str) -> str:
    """A control-plane operation (register, unregister) run as a Celery task: its JSON state."""
    return f"{PREFIX}:manager:op:{op_id}"


def operation_lease(op_id: str) -> str:
    """Held (with a TTL, renewed) by the task running the operation: a missing lease means nobody does."""
    return f"{PREFIX}:manager:op:{op_id}:lease"


# Set of operation ids not finished yet (a restarted manager resubmits those nobody runs).
OPEN_OPERATIONS = f"{PREFIX}:manager:ops:open"
# Key prefix of the manager's Celery broker (kombu `global_keyprefix`) on the same Redis. Its hash
# tag keeps kombu's keys in one Redis Cluster slot (its BRPOP and transactions span them).
CELERY_PREFIX = f"{PREFIX}:{{celery}}:"


def manager_replies(call_id: str) -> str:
    """Reply stream of one manager call that sends a job to a worker (customized describe)."""
    return f"{PREFIX}:{{mgr:{call_id}}}:replies"


def version_keys_pattern(model: str, version: str) -> str:
    """SCAN pattern of every key of one model version (heartbeats and cancel flags included)."""
    return f"{_version_tag(model, version)}:*"


# Token authorization (sluice.auth.store): hash kind -> SHA-256 digest of its key, plus
# "<kind>_expires_ms". Written by the manager (startup, /token); read by every API process.
AUTH_KEYS = f"{PREFIX}:auth:keys"


def handler_metrics(model: str, version: str) -> str:
    """Hash of the metrics the version's handlers record through ``context.metrics`` (TorchServe's
    model metrics): a field per series and part, see :mod:`sluice.handler_metrics`."""
    return f"{_version_tag(model, version)}:handler-metrics"
