"""What every wire protocol's adapter gives the worker, and the request form they build: a batch
row in TorchServe's decoded-request form, which ``ts.service.Service.predict`` turns into the
handler's ``data`` list and per-row request headers (see docs/design.md, "Contracts")."""

from typing import Any, Protocol, TypedDict

from sluice.envelope import Job


class TsParameter(TypedDict):
    name: str
    contentType: str
    # bytearray for TorchServe gRPC; decoded or raw REST bodies; a dict (JSON body) or arrays for
    # KServe v2.
    value: Any


class TsHeader(TypedDict):
    name: bytes
    value: bytes


class TsRequest(TypedDict):
    """One request of a batch, as TorchServe's worker decodes it off its socket."""

    requestId: bytes
    parameters: list[TsParameter]
    headers: list[TsHeader]


class WireAdapter(Protocol):
    """How the jobs of one wire protocol (``Job.protocol``) become handler rows, and how a row's
    result becomes what the gateway sends that job's client."""

    def row(self, job: Job, request: bytes | memoryview) -> tuple[list[TsParameter], dict[str, str]]:
        """The parameters of ``job``, whose client request is ``request``, and the extra per-row
        headers beside ``Job.headers``; raises SluiceError for a request the client got wrong."""
        ...

    def payload(self, job: Job, body: bytes) -> bytes:
        """The reply payload for one result body of ``job``; raises SluiceError when the body
        cannot be one."""
        ...

    def join(self, job: Job, bodies: list[bytes]) -> bytes:
        """One result body from the chunks a generative model answered ``job`` with, in order, for
        a client that takes one answer (``Job.final_only``); raises SluiceError when they cannot be
        joined."""
        ...
