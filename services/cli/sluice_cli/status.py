"""``sluice status``: the supervisor and each service of a running Sluice, from the pid file the
supervisor keeps current: pid, up since, restarts, last exit code, and whether it was given up.

Exit code as an LSB init script's ``status``: 0 everything runs, 1 something is down, 3 not running.
"""

import time

from sluice_cli import output
from sluice_cli.children import exit_description
from sluice_cli.runtime import PidFile, ProcessRef, RuntimeDir
from sluice_cli.settings import CliSettings

NOT_RUNNING = 3
_COLUMNS = "  {:<11} {:<9} {:>8}  {:<30} {:>8}  {}"


def status(settings: CliSettings) -> int:
    runtime = RuntimeDir.at(settings.home)
    state = PidFile.read(runtime.pid_file)
    if state is None:
        output.info("Sluice is not running.")
        return NOT_RUNNING
    lines, healthy = describe(state, now_s=time.time())
    output.info("\n".join([f"Sluice ({runtime.pid_file})", *lines]))
    return 0 if healthy else 1


def describe(state: PidFile, *, now_s: float) -> tuple[list[str], bool]:
    """The status lines of ``state`` and whether everything in it runs."""
    lines = [_COLUMNS.format("SERVICE", "STATE", "PID", "UP SINCE", "RESTARTS", "LAST EXIT")]
    notes = []
    healthy = True
    supervisor = state.supervisor
    if supervisor is not None:
        running = supervisor.alive()
        lines.append(_row(supervisor, "up" if running else "down", "-", "-", now_s))
        if not running:
            healthy = False
            notes.append("the supervisor is not running: nothing restarts a service that crashes "
                         "(`sluice stop` still stops them)")  # fmt: skip
    for ref in state.processes:
        history = state.history_of(ref.name)
        running = ref.alive()
        label = "given up" if history.given_up else ("up" if running else "down")
        last_exit = "-" if history.last_exit_code is None else exit_description(history.last_exit_code)
        lines.append(
            _row(ref, label, str(history.restarts), last_exit.removeprefix("exited with code "), now_s)
        )
        healthy = healthy and running
        if history.given_up:
            notes.append(f"the {ref.name} was given up: {history.given_up} (its log: {ref.log_file})")
    return [*lines, *(f"  {note}" for note in notes)], healthy


def _row(ref: ProcessRef, label: str, restarts: str, last_exit: str, now_s: float) -> str:
    running = label == "up"
    pid = str(ref.pid) if running else "-"
    since = _since(ref.start_time, now_s) if running else "-"
    return _COLUMNS.format(ref.name, label, pid, since, restarts, last_exit)


def _since(start_s: float, now_s: float) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start_s))
    return f"{stamp} ({_duration(now_s - start_s)})"


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
