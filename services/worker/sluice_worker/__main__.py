"""``python -m sluice_worker --model-name M --model-version V [--worker-id ID] [--gpu-id N]
[--torch-threads N]``, with ``SLUICE_REDIS_URL`` and the other ``SLUICE_*`` settings in the environment.

``python -m sluice_worker --standby``: import everything (torch, ``ts``) now, then wait on stdin for
the launcher to assign the same arguments (see :mod:`sluice.lifecycle.worker_standby`)."""

import os

# A worker shares its host's cores with the gateway, Redis and its peers. OpenMP's default lets idle
# torch threads spin after every parallel region, which burns the CPU those processes need (for a
# small model it doubled the worker's CPU per request). Passive threads sleep instead. Must be set
# before torch loads OpenMP; a value from the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import asyncio
import sys
from collections.abc import Coroutine, Sequence
from typing import Any

from sluice.large_buffers import keep_large_buffers
from sluice.lifecycle.worker_standby import STANDBY_FLAG, AssignmentError, await_assignment
from sluice.log import configure_logging
from sluice.settings.common import describe_error
from sluice.typed import InvalidValue

from sluice_worker import app
from sluice_worker.exit_codes import ExitCode
from sluice_worker.settings import parse_args
from sluice_worker.torch_thread import TorchThread


def main(argv: Sequence[str] | None = None) -> None:
    args: Sequence[str] | None = argv
    if list(sys.argv[1:] if argv is None else argv) == [STANDBY_FLAG]:
        # The imports above (the worker app, torch, ts) are what a standby saves its future worker.
        try:
            args = await_assignment()
        except AssignmentError as exc:
            print(f"sluice_worker: {exc}", file=sys.stderr)
            sys.exit(2)
        if args is None:  # the launcher went away without assigning us
            sys.exit(0)
    try:
        settings = parse_args(args)
    except InvalidValue as exc:
        print(f"sluice_worker: {describe_error(exc)}", file=sys.stderr)
        sys.exit(2)
    configure_logging("worker", settings.log_format, settings.log_level)
    keep_large_buffers()
    torch_thread = TorchThread()
    exit_code = _run(app.run(settings, torch_thread))
    if torch_thread.busy or exit_code is ExitCode.HANDLER_DIED:
        # A handler that is still running (timed out, or stuck after sys.exit()) cannot be stopped;
        # leave without waiting for it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(exit_code))
    sys.exit(int(exit_code))


def _run(main_coroutine: Coroutine[Any, Any, ExitCode]) -> ExitCode:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main_coroutine)
    result: ExitCode = uvloop.run(main_coroutine)
    return result


if __name__ == "__main__":
    main()
