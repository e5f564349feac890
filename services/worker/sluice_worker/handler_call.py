"""One handler call under the response-timeout watchdog, on the torch thread or inline on the loop's
own thread (:mod:`.inline_runner`, guarded by :mod:`.broker.call_guard`), as plain batching and
continuous batching make it: the frame read into replies by ``read``, or the failure TorchServe would
give every job of the call (a handler past ``response_timeout`` or calling ``sys.exit()``: "Worker
died." and the worker exits; an error around the call: "Prediction failed")."""

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from sluice.log import get_logger

from sluice_worker import frames, runtime
from sluice_worker.broker.outbox import Command, reply_commands
from sluice_worker.exit_codes import ExitCode
from sluice_worker.frames import PredictFrame
from sluice_worker.inline_runner import InlineRunner
from sluice_worker.job_loop import PREDICTION_FAILED
from sluice_worker.protocols import TsRequest
from sluice_worker.replies import WORKER_DIED, Outgoing, ReplyBook
from sluice_worker.sink import DirectSink, ReplySink
from sluice_worker.torch_thread import HandlerExit, TorchThread

log = get_logger(__name__)


async def call_handler(
    runner: TorchThread | InlineRunner,
    service: runtime.HandlerService,
    requests: list[TsRequest],
    book: ReplyBook,
    *,
    response_timeout_s: float,
    publish: Callable[[Sequence[Outgoing]], Awaitable[None]],
    read: Callable[[PredictFrame], list[Outgoing]],
    abandon: Callable[[list[Outgoing]], list[Command]] | None = None,
) -> tuple[list[Outgoing], ExitCode | None]:
    """The call's replies (intermediate frames go out through ``publish`` while it runs), and the
    exit code when the worker must exit. An inline call (``runner`` an InlineRunner) needs
    ``abandon``: the commands that send the replies it is given up with and ack its jobs (its guard
    runs them at the deadline, then ends the process)."""
    loop = asyncio.get_running_loop()
    sink: ReplySink | DirectSink
    call: Awaitable[bytes]
    if isinstance(runner, InlineRunner):
        if abandon is None:
            raise ValueError("an inline handler call needs the commands that abandon it")
        guard = runner.guard
        sink = DirectSink(
            book, lambda outgoing, given_up: guard.publish(reply_commands(outgoing), given_up), loop
        )
        call = runner.run_within(
            response_timeout_s,
            lambda: abandon(book.fail_all(WORKER_DIED)),
            runtime.predict,
            service,
            requests,
            sink,
        )
    else:
        sink = ReplySink(book, publish, loop)
        call = asyncio.wait_for(runner.run(runtime.predict, service, requests, sink), response_timeout_s)
    try:
        raw = await call
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
