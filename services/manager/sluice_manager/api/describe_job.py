"""DescribeModel with ``customized=true``: a DESCRIBE job on the version's stream, answered by one of
its workers with the handler's ``describe_handle`` output (TorchServe's customized metadata).

The job is admitted like an inference job, by the one admission rule (:mod:`sluice.admission`): the
version is active, has a worker or scales from zero (then the manager is asked for a worker), and its
queue has room. It is marked streaming, so that it runs alone and never joins a prediction batch. The
reply comes back on a stream of this call's own, which is deleted afterwards.
"""

import json
import time
import uuid
from typing import Any, cast

import redis.asyncio as aioredis
from sluice import admission, envelope
from sluice.admission import Outcome
from sluice.envelope import Job, WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.redis import keys
from sluice.redis.client import connect
from sluice.registry.records import VersionRecord

Json = dict[str, Any]

# Stream entry that creates the reply stream (workers reply with NOMKSTREAM).
_PLACEHOLDER: dict[Any, Any] = {b"placeholder": b"1"}


def no_worker(model: str, code: ErrorCode = ErrorCode.NO_WORKER) -> SluiceError:
    """TorchServe's answer when the job is refused; its text is the same for a full queue (as for
    inference), the code tells them apart."""
    return SluiceError(
        code,
        f'Model "{model}" has no worker to serve describe request. '
        "Please use scale workers API to add workers.",
    )


def refusal(model: str, outcome: Outcome) -> SluiceError | None:
    """What a describe call whose job the rule did not admit is told (None: admitted)."""
    if outcome is Outcome.QUEUE_FULL:
        return no_worker(model, ErrorCode.QUEUE_FULL)
    if outcome in (Outcome.NO_WORKER, Outcome.NOT_FOUND):
        return no_worker(model)
    return None


def metadata(payload: bytes) -> Json:
    """The handler's describe output as a JSON object; anything else becomes ``{}`` (TorchServe)."""
    try:
        value = json.loads(payload)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class DescribeJobs:
    def __init__(self, redis: "aioredis.Redis", redis_url: str) -> None:
        self.redis = redis
        self._redis_url = redis_url
        self._admit = redis.register_script(admission.ENQUEUE_SCRIPT)

    async def customized(self, record: VersionRecord, headers: dict[str, str], body: bytes) -> Json:
        model, version = record.model_name, record.version
        call_id = uuid.uuid4().hex
        reply_to = keys.manager_replies(call_id)
        timeout_s = float(record.response_timeout_s)
        first_id = await self.redis.xadd(reply_to, _PLACEHOLDER)
        await self.redis.expire(reply_to, int(timeout_s) + 60)
        try:
            job = self._job(record, call_id, reply_to, headers, body, timeout_s)
            answer = await self._admit(
                keys=admission.script_keys(model, version),
                args=[envelope.encode_job(job), keys.EVENTS_CHANNEL],
            )
            refused = refusal(model, admission.outcome_of(answer))
            if refused is not None:
                raise refused
            return metadata(await self._await_reply(reply_to, first_id, timeout_s, model))
        finally:
            await self.redis.delete(reply_to)

    @staticmethod
    def _job(
        record: VersionRecord,
        call_id: str,
        reply_to: str,
        headers: dict[str, str],
        body: bytes,
        timeout_s: float,
    ) -> Job:
        now_ms = int(time.time() * 1000)
        job = Job(
            job_id=call_id,
            protocol=WireProtocol.DESCRIBE,
            model_name=record.model_name,
            model_version=record.version,
            reply_to=reply_to,
            deadline_unix_ms=now_ms + int(timeout_s * 1000),
            streaming=True,
            request=body,
            enqueued_unix_ms=now_ms,
        )
        job.headers.update(headers)
        return job

    async def _await_reply(self, reply_to: str, after: Any, timeout_s: float, model: str) -> bytes:
        deadline = time.monotonic() + timeout_s
        reader = connect(self._redis_url, blocking_read_s=timeout_s)
        try:
            while (left_s := deadline - time.monotonic()) > 0:
                block_ms = max(1, int(left_s * 1000))
                found = cast(list[Any], await reader.xread({reply_to: after}, count=10, block=block_ms) or [])
                for _, entries in found:
                    for entry_id, fields in entries:
                        after = entry_id
                        reply = envelope.decode_reply(fields[envelope.FIELD])
                        if not reply.final:
                            continue
                        if reply.error_code:
                            raise _failure(reply)
                        return bytes(reply.payload)
        finally:
            await reader.aclose()
        raise SluiceError(ErrorCode.DEADLINE_EXCEEDED, f"Timed out waiting for the describe reply of {model}")


def _failure(reply: envelope.Reply) -> SluiceError:
    try:
        code = ErrorCode[reply.error_code]
    except KeyError:
        code = ErrorCode.HANDLER_FAILED
    return SluiceError(code, reply.message or "Describe failed", reply.status_code or None)
