"""The admission rule, once for every caller: may a job join its model version's job stream?

Refused when the version is not active (``NOT_FOUND``), when it runs no worker and does not scale from
zero (``NO_WORKER``), or when its stream already holds ``job_queue_size`` jobs (``QUEUE_FULL``). A job
admitted while the version runs no worker is admitted ``COLD``, and the manager is asked for a worker
(a ``demand`` event on the registry channel).

The rule is Lua (``rule.lua``), run inside Redis so that the check and the add are one atomic step. It
comes in front of two scripts: :data:`ENQUEUE_SCRIPT` checks a job and adds it; :data:`ADMIT_ADDED_SCRIPT`
checks a job that a plain ``XADD`` added just before it in the same ``MULTI``/``EXEC`` and deletes it
when refused (the gateway's large jobs, whose payload would cost Redis two more copies through Lua).
Both take :func:`script_keys`; their answers read as an :class:`Outcome` (:func:`outcome_of`). The
gateway admits inference jobs through both, the manager its describe jobs through the first.
"""

import enum
import hashlib
from pathlib import Path

from sluice.redis import keys

_HERE = Path(__file__).parent


def _code(name: str) -> str:
    """A script's text without its comment lines: the large-job script is sent with every job."""
    lines = (_HERE / name).read_text().splitlines()
    return "".join(f"{line}\n" for line in lines if line.strip() and not line.lstrip().startswith("--"))


_RULE = _code("rule.lua")
# KEYS: script_keys(); ARGV: the encoded job, keys.EVENTS_CHANNEL. Answers an entry id or a name.
ENQUEUE_SCRIPT = _RULE + _code("enqueue.lua")
ENQUEUE_SCRIPT_SHA = hashlib.sha1(ENQUEUE_SCRIPT.encode()).hexdigest()
# KEYS: script_keys(); ARGV: keys.EVENTS_CHANNEL. Answers a name. Send it with EVAL, never EVALSHA:
# inside EXEC a NOSCRIPT error would come after the XADD took effect.
ADMIT_ADDED_SCRIPT = _RULE + _code("admit_added.lua")


class Outcome(enum.Enum):
    """What the rule decided about one job."""

    ADMITTED = "ADMITTED"
    # Admitted while the version runs no worker (it scales from zero): the job waits for one to start.
    COLD = "COLD"
    # The version is not registered, or no longer active.
    NOT_FOUND = "NOT_FOUND"
    NO_WORKER = "NO_WORKER"
    QUEUE_FULL = "QUEUE_FULL"


# A script's named answers; any other answer (the new entry's id) is ADMITTED.
NAMED: dict[bytes, Outcome] = {outcome.value.encode(): outcome for outcome in Outcome}


def outcome_of(answer: object) -> Outcome:
    """The outcome a script answered: a name, else (the new entry's id) admitted."""
    if isinstance(answer, str):  # a client that decodes its answers
        answer = answer.encode()
    return NAMED.get(answer, Outcome.ADMITTED) if isinstance(answer, bytes) else Outcome.ADMITTED


def script_keys(model: str, version: str) -> list[str]:
    """The keys both scripts take: the version's config hash, workers hash and job stream."""
    return [
        keys.version_config(model, version),
        keys.workers(model, version),
        keys.job_stream(model, version),
    ]
