"""Steady load for fault tests: client threads call a model over one gRPC channel, one unique request
after another, until stopped; every call is recorded with its answer or its error.

The model is :func:`sleeper_model` (or any handler answering ``"<command> ..."``): each request is
``sleep:<seconds>:<client>-<n>``, so an answer shows which request it belongs to.
"""

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import grpc
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc

from tests.support.models import ModelSpec

SLEEPER_HANDLER = """\
import socket
import time


def handle(data, context):
    if data is None:
        return None
    out = []
    for row in data:
        command = bytes(row.get("data") or b"").decode()
        kind, _, rest = command.partition(":")
        if kind == "sleep":
            time.sleep(float(rest.split(":", 1)[0]))
        out.append(f"{command} host={socket.gethostname()}")
    return out
"""


def sleeper_model(name: str = "sleeper", config: str = "") -> ModelSpec:
    """Answers ``<command> host=<hostname>`` (a worker container's hostname is its id) after sleeping
    what ``sleep:<s>:...`` asks."""
    files: dict[str, bytes | str] = {"handler.py": SLEEPER_HANDLER, "model-config.yaml": config or "{}\n"}
    return ModelSpec(name=name, handler="handler.py", files=files, config_file="model-config.yaml")


@dataclass(frozen=True)
class Call:
    command: str
    started: float
    ended: float
    answer: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        """Answered, with the answer to this very request."""
        return not self.error and self.answer.startswith(f"{self.command} ")

    @property
    def host(self) -> str:
        return self.answer.rsplit("host=", 1)[-1] if self.ok else ""


class SteadyLoad:
    def __init__(
        self,
        target: str,
        model: str,
        metadata: Sequence[tuple[str, str]] = (),
        *,
        clients: int = 4,
        sleep_s: float = 0.1,
        timeout_s: float = 60.0,
    ) -> None:
        self._channel = grpc.insecure_channel(target)
        self._stub = pb_grpc.InferenceAPIsServiceStub(self._channel)
        self._model = model
        self._metadata = tuple(metadata)
        self._sleep_s = sleep_s
        self._timeout_s = timeout_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)
        ]

    def __enter__(self) -> "SteadyLoad":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> list[Call]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self._timeout_s + 10)
        self._channel.close()
        return self.calls()

    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def wait_for_calls(self, count: int, timeout_s: float = 120) -> None:
        """Until ``count`` calls more than now have been answered successfully."""
        target = sum(call.ok for call in self.calls()) + count
        deadline = time.monotonic() + timeout_s
        while sum(call.ok for call in self.calls()) < target:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} more successful calls not made within {timeout_s} s")
            time.sleep(0.05)

    def _client(self, index: int) -> None:
        number = 0
        while not self._stop.is_set():
            number += 1
            command = f"sleep:{self._sleep_s}:{index}-{number}"
            request = pb.PredictionsRequest(model_name=self._model, input={"data": command.encode()})
            started = time.monotonic()
            try:
                reply = self._stub.Predictions(request, metadata=self._metadata, timeout=self._timeout_s)
                call = Call(command, started, time.monotonic(), answer=reply.prediction.decode())
            except grpc.RpcError as err:
                call = Call(command, started, time.monotonic(), error=f"{err.code().name}: {err.details()}")
            with self._lock:
                self._calls.append(call)


# What a call may end with while the broker fails over, besides its own answer.
CLEAR_FAILURES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED"})


def unclear(calls: Sequence[Call], *, hang_after_s: float | None = None) -> list[Call]:
    """Calls answered with another call's answer, failed with a status that does not say why, or
    (with ``hang_after_s``) that ended that long or longer after they started."""
    return [
        call
        for call in calls
        if (not call.error and not call.ok)
        or (call.error and call.error.split(":", 1)[0] not in CLEAR_FAILURES)
        or (hang_after_s is not None and call.ended - call.started > hang_after_s)
    ]
