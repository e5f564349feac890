"""One handler call on the torch thread under the response-timeout watchdog, as plain batching and
continuous batching make it: the frame read into replies by ``read``, or the failure TorchServe would
give every job of the call (a handler past ``response_timeout`` or calling ``sys.exit()``: "Worker
died." and the worker exits; an error around the call: "Prediction failed")."""

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from sluice.log import get_logger

from sluice_worker import frames, runtime
from sluice_worker.exit_codes import ExitCode
from sluice_worker.frames import PredictFrame
from sluice_worker.job_loop import PREDICTION_FAILED
from sluice_worker.protocols import TsRequest
from sluice_worker.replies import WORKER_DIED, Outgoing, ReplyBook
from sluice_worker.sink import ReplySink
from sluice_worker.torch_thread import HandlerExit, TorchThread

log = get_logger(__name__)


async def call_handler(
    torch: TorchThread,
    service: runtime.HandlerService,
    requests: list[TsRequest],
    book: ReplyBook,
    *,
    response_timeout_s: float,
    publish: Callable[[Sequence[Outgoing]], Awaitable[None]],
    read: Callable[[PredictFrame], list[Outgoing]],
) -> tuple[list[Outgoing], ExitCode | None]:
    """The call's replies (intermediate frames go out through ``publish`` while it runs), and the
    exit code when the worker must exit."""
    sink = ReplySink(book, publish, asyncio.get_running_loop())
    try:
        raw = await asyncio.wait_for(torch.run(runtime.predict, service, requests, sink), response_timeout_s)
        return read(frames.decode(raw)), None
    except TimeoutError:
        log.error(
            "handler exceeded response_timeout; the worker exits", response_timeout_s=response_timeout_s
        )
        return book.fail_all(WORKER_DIED), ExitCode.HANDLER_DIED
    except HandlerExit as exc:
        log.error("handler exited the worker", cause=repr(exc.cause))
        return book.fail_all(WORKER_DIED), ExitCode.HANDLER_DIED
    except Exception:
        log.exception("handler call failed outside the handler")
        return book.fail_all(PREDICTION_FAILED), None
    finally:
        sink.close()
