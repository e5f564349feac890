"""``sluice start``: check the ports (and that a Sentinel names the master, when Sentinels are set, or
that a Cluster node serves every slot, when a Cluster is), plan the services (a private Redis unless
``sluice_redis_url``, ``sluice_redis_sentinels`` or ``sluice_redis_cluster`` is set, the
manager, the gateway) and hand them to a supervisor that restarts them when they crash: a
detached one that answers once Sluice serves (the default), or this process with ``--foreground``."""

import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from sluice.log import configure_logging
from sluice.redis.target import is_cluster, is_sentinel, parse_cluster_url, parse_sentinel_url

from sluice_cli import output
from sluice_cli.children import exit_description
from sluice_cli.outcome import GaveUp, Interrupted, StartFailed
from sluice_cli.plan import StartReport, SupervisorPlan, build_plan
from sluice_cli.runtime import PidFile, RuntimeDir, remove_pid_file, this_process
from sluice_cli.services import StartOptions, port_in_use
from sluice_cli.settings import LOOPBACK, CliSettings
from sluice_cli.stop import stop_all, stop_budget_s
from sluice_cli.supervise import MARKER
from sluice_cli.supervisor import Supervisor, interrupt_on_signals

# How long each Sentinel (or Cluster node) may take to answer the preflight's question.
SENTINEL_TIMEOUT_S = 2.0


def start(
    settings: CliSettings, options: StartOptions, environ: Mapping[str, str], *, foreground: bool, fresh: bool
) -> int:
    runtime = RuntimeDir.at(settings.home)
    runtime.prepare()
    previous = PidFile.read(runtime.pid_file)
    if previous is not None and previous.live():
        output.error(f"Sluice is already running (pid file {runtime.pid_file}). Stop it with: sluice stop")
        return 1
    remove_pid_file(runtime.pid_file)
    problem = _preflight(settings, options)
    if problem:
        output.error(problem)
        return 1
    plan = build_plan(settings, options, environ, runtime, fresh=fresh)
    interrupt_on_signals()
    if foreground:
        return _foreground(settings, plan)
    return _detached(settings, plan)


def _preflight(settings: CliSettings, options: StartOptions) -> str:
    if options.models and settings.model_store is None:
        return (
            "--models needs a model store: pass --model-store DIR (or set model_store in config.properties)"
        )
    if settings.model_store is not None and not settings.model_store.is_dir():
        return f"model store {settings.model_store} is not a folder"
    if settings.private_redis and port_in_use(LOOPBACK, settings.redis_port):
        return f"port {settings.redis_port} for the private Redis is in use (set sluice_redis_port)"
    if is_sentinel(settings.redis_url):
        problem = _sentinel_problem(settings.redis_url)
        if problem:
            return problem
    if is_cluster(settings.redis_url):
        problem = _cluster_problem(settings.redis_url)
        if problem:
            return problem
    host = settings.gateway_target.rsplit(":", 1)[0]
    if port_in_use(host, settings.grpc_inference_port):
        return f"the gRPC inference port {settings.gateway_target} is in use (set grpc_inference_port)"
    management_host = _local_host(settings.grpc_management_address)
    if port_in_use(management_host, settings.grpc_management_port):
        return (
            f"the gRPC management port {management_host}:{settings.grpc_management_port} is in use "
            "(set grpc_management_port)"
        )
    return ""


def _sentinel_problem(url: str) -> str:
    """Why Sluice cannot start on these Sentinels (empty: one of them names the master)."""
    from sluice.redis.sentinel import NoMaster, master_address_sync

    try:
        master_address_sync(parse_sentinel_url(url), SENTINEL_TIMEOUT_S)
    except NoMaster as exc:
        return f"{exc} (set sluice_redis_sentinels and sluice_redis_sentinel_master)"
    return ""


def _cluster_problem(url: str) -> str:
    """Why Sluice cannot start on this Redis Cluster (empty: a node serves a map of every slot)."""
    from sluice.redis.cluster_probe import NoSlotMap, slot_owner_sync

    try:
        slot_owner_sync(parse_cluster_url(url), 0, SENTINEL_TIMEOUT_S)
    except NoSlotMap as exc:
        return f"{exc} (set sluice_redis_cluster)"
    return ""


def _local_host(host: str) -> str:
    return LOOPBACK if host in ("0.0.0.0", "::", "") else host


def _foreground(settings: CliSettings, plan: SupervisorPlan) -> int:
    """Supervise from this process: a crash loop stops Sluice and exits 1."""
    runtime = plan.runtime
    with open(runtime.log_file("supervisor"), "a", encoding="utf-8") as log:
        configure_logging("supervisor", stream=log)
        supervisor = Supervisor(plan, stop_on_give_up=True, notify=output.error)
        try:
            supervisor.launch(this_process("supervisor", "sluice"))
            statuses = supervisor.wait_until_serving()
        except StartFailed as failure:
            output.start_failed(failure, runtime)
            supervisor.stop()
            return 1
        except Interrupted:
            output.info("Interrupted; stopping what was started.")
            supervisor.stop()
            return 130
        output.serving(settings, runtime, plan.state, statuses)
        output.info("Running in the foreground; Ctrl-C stops Sluice.")
        try:
            supervisor.run()
        except GaveUp as failure:
            output.stopped_unexpectedly(failure)
            supervisor.stop()
            return 1
        except Interrupted:
            output.info("Stopping Sluice ...")
            supervisor.stop()
            output.info("Sluice stopped.")
        return 0


def _detached(settings: CliSettings, plan: SupervisorPlan) -> int:
    """Hand the plan to a detached supervisor and relay its answer."""
    runtime = plan.runtime
    process = None
    try:
        with open(runtime.log_file("supervisor"), "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", MARKER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        assert process.stdin is not None
        assert process.stdout is not None
        with process.stdin:
            process.stdin.write(plan.model_dump_json().encode())
        line = process.stdout.readline()
    except Interrupted:
        output.info("Interrupted; stopping what was started.")
        if process is not None:
            _wait_for_supervisor(process, plan, interrupt=True)
        return 130
    if not line:
        code = _wait_for_supervisor(process, plan)
        output.start_failed(
            StartFailed(f"the supervisor {exit_description(code)}", [runtime.log_file("supervisor")]), runtime
        )
        return 1
    report = StartReport.model_validate_json(line)
    if not report.ok:
        output.start_failed(StartFailed(report.reason, [Path(path) for path in report.logs]), runtime)
        _wait_for_supervisor(process, plan)
        return 1
    output.serving(settings, runtime, plan.state, report.statuses)
    return 0


def _wait_for_supervisor(
    process: "subprocess.Popen[bytes]", plan: SupervisorPlan, *, interrupt: bool = False
) -> int | None:
    """Wait (bounded) until the supervisor has stopped what it started (asking it to, with
    ``interrupt``); if it does not, stop what the pid file lists here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if interrupt and process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=stop_budget_s(plan.worker_stop_timeout_s))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    # A supervisor that stopped what it started removed the pid file.
    state = PidFile.read(plan.runtime.pid_file)
    if state is not None:
        stop_all(state, plan.worker_stop_timeout_s)
        remove_pid_file(plan.runtime.pid_file)
    return process.returncode
