"""The manager's describe jobs (DescribeModel with ``customized=true``): TorchServe's describe
request has no inputs and the header ``describe: True`` (``BaseHandler.describe_handle``); its
result is sent as the handler wrote it."""

from sluice.envelope import Job

from sluice_worker.protocols.base import TsParameter

DESCRIBE_HEADERS = {"describe": "True"}


class Describe:
    def row(self, job: Job, request: bytes | memoryview) -> tuple[list[TsParameter], dict[str, str]]:
        return [], dict(DESCRIBE_HEADERS)

    def payload(self, job: Job, body: bytes) -> bytes:
        return body

    def join(self, job: Job, bodies: list[bytes]) -> bytes:
        return b"".join(bodies)
