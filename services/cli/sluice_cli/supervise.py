"""``python -m sluice_cli.supervise``: the detached supervisor of a background ``sluice start``.

Reads its plan (JSON) from stdin, starts the services, answers ``sluice start`` with one JSON line
on stdout (a :class:`~sluice_cli.plan.StartReport`) once Sluice serves or cannot, then supervises
until SIGTERM (``sluice stop``) and stops the services in order. It runs in a session of its own, so
it outlives the terminal ``sluice start`` ran in; its log (stderr) is ``<runtime dir>/logs/supervisor.log``.
"""

import os
import sys

from sluice.log import configure_logging, get_logger

from sluice_cli.outcome import Interrupted, StartFailed
from sluice_cli.plan import StartReport, SupervisorPlan
from sluice_cli.runtime import this_process
from sluice_cli.supervisor import Supervisor, interrupt_on_signals

# A word of its command line, for the pid file's identity checks.
MARKER = "sluice_cli.supervise"

log = get_logger(__name__)


def main() -> int:
    configure_logging("supervisor")
    interrupt_on_signals()
    plan = SupervisorPlan.model_validate_json(sys.stdin.buffer.read())
    supervisor = Supervisor(plan, stop_on_give_up=False)
    try:
        supervisor.launch(this_process("supervisor", MARKER))
        statuses = supervisor.wait_until_serving()
    except StartFailed as failure:
        supervisor.stop()
        _report(StartReport(ok=False, reason=failure.reason, logs=[str(path) for path in failure.logs]))
        return 1
    except Interrupted:
        supervisor.stop()
        _report(StartReport(ok=False, reason="stopped (by sluice stop or a signal) before it served"))
        return 130
    except Exception as exc:
        log.exception("start failed")
        supervisor.stop()
        _report(StartReport(ok=False, reason=f"the supervisor failed: {type(exc).__name__}: {exc}"))
        return 1
    _report(StartReport(ok=True, statuses=statuses))
    log.info("sluice is serving; supervising", services=[ref.name for ref in plan.state.processes])
    try:
        supervisor.run()
    except Interrupted:
        log.info("stopping sluice")
        supervisor.stop()
        log.info("sluice stopped")
    return 0


def _report(report: StartReport) -> None:
    """Answer ``sluice start``, then point stdout at the log: the pipe's reader is gone soon."""
    try:
        sys.stdout.write(report.model_dump_json() + "\n")
        sys.stdout.flush()
    except OSError:
        log.warning("sluice start did not wait for the outcome of the start")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
