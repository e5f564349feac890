"""The ``sluice`` command: ``start``, ``stop``, ``status``, ``demo``; TorchServe's ``--start`` / ``--stop``
spellings and start flags are accepted too (``torchserve --start --model-store s --models m.mar``)."""

import argparse
import dataclasses
import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from sluice.settings.common import describe_error
from sluice.typed import InvalidValue

from sluice_cli import output
from sluice_cli.services import StartOptions
from sluice_cli.settings import CliSettings
from sluice_cli.start import start
from sluice_cli.status import status
from sluice_cli.stop import stop

COMMANDS = ("start", "stop", "status", "demo")
# TorchServe flags that mean nothing to Sluice; accepted so that TorchServe command lines still run.
IGNORED_FLAGS = ("--log-config", "--cpp-log-config", "--plugins-path")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice", description="Run Sluice (Redis, manager, gateway) as local processes."
    )
    version = importlib.metadata.version("sluice-serve")
    parser.add_argument("-v", "--version", action="version", version=f"sluice {version}")
    commands = parser.add_subparsers(dest="command", metavar="{start,stop,status,demo}")
    start_parser = commands.add_parser("start", help="start Sluice (also: sluice --start)")
    _start_options(start_parser, with_models=True)
    commands.add_parser("stop", help="stop Sluice (also: sluice --stop)")
    commands.add_parser("status", help="each service: pid, up since, restarts, last exit")
    demo = commands.add_parser("demo", help="build the demo model and serve it in the foreground")
    _start_options(demo, with_models=False)
    return parser


def _start_options(parser: argparse.ArgumentParser, *, with_models: bool) -> None:
    if with_models:
        parser.add_argument(
            "--model-store", dest="model_store", type=Path, help="folder holding the archives"
        )
        parser.add_argument(
            "--workflow-store", dest="workflow_store", type=Path,
            help="folder holding the workflow archives (.war); the model store when not given",
        )  # fmt: skip
        parser.add_argument(
            "--models",
            nargs="+",
            metavar="[NAME=]ARCHIVE",
            help="archives to load at startup: a.mar, name=a.mar, all (TorchServe's load_models)",
        )
        parser.add_argument("--foreground", action="store_true", help="stay attached; Ctrl-C stops Sluice")
    parser.add_argument("--ts-config", dest="ts_config", type=Path, help="TorchServe config.properties")
    parser.add_argument(
        "--ncs", "--no-config-snapshots", dest="ncs", action="store_true",
        help="start with an empty registry (do not restore models registered in an earlier run)",
    )  # fmt: skip
    parser.add_argument("--disable-token-auth", "--dt", dest="disable_token_auth", action="store_true")
    parser.add_argument("--enable-model-api", dest="enable_model_api", action="store_true")
    for flag in IGNORED_FLAGS:
        parser.add_argument(flag, dest=flag.strip("-").replace("-", "_"), help=argparse.SUPPRESS)
    parser.add_argument("--ppath", dest="plugins_path", help=argparse.SUPPRESS)


def normalize(argv: Sequence[str]) -> list[str]:
    """Turn TorchServe's ``--start`` / ``--stop`` into commands; no command but flags means start."""
    args = list(argv)
    if args and args[0] in COMMANDS:
        return args
    for flag, command in (("--start", "start"), ("--stop", "stop")):
        if flag in args:
            args.remove(flag)
            return [command, *args]
    if args and not {"-h", "--help", "-v", "--version"} & set(args):
        return ["start", *args]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # No tracebacks for users; the services' own logs have the details.
        output.error(f"unexpected error: {type(exc).__name__}: {exc}")
        return 1


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(normalize(sys.argv[1:] if argv is None else argv))
    if args.command is None:
        parser.print_help()
        return 0
    if any(getattr(args, flag.strip("-").replace("-", "_"), None) for flag in IGNORED_FLAGS):
        output.info("note: TorchServe's log4j and plugin flags are ignored by Sluice")
    ts_config = _ts_config(getattr(args, "ts_config", None))
    if ts_config is not None:
        # Read by the settings below (as their ts_config) and inherited by the services.
        os.environ["SLUICE_TS_CONFIG"] = str(ts_config)
    try:
        settings = _settings(args)
    except InvalidValue as exc:
        output.error(describe_error(exc))
        return 2
    if args.command == "stop":
        return stop(settings)
    if args.command == "status":
        return status(settings)
    if args.command == "demo":
        return _demo(args, settings)
    options = _options(args, settings, ts_config)
    return start(settings, options, os.environ, foreground=args.foreground, fresh=args.ncs)


def _ts_config(flag: Path | None) -> Path | None:
    """TorchServe's lookup: --ts-config, else ./config.properties (TS_CONFIG_FILE beats both)."""
    if flag is not None:
        return flag.absolute()
    default = Path("config.properties")
    return default.absolute() if default.is_file() else None


def _settings(args: argparse.Namespace) -> CliSettings:
    overrides: dict[str, object] = {}
    if getattr(args, "model_store", None) is not None:
        overrides["model_store"] = args.model_store.absolute()
    if getattr(args, "models", None):
        overrides["load_models"] = ",".join(args.models)
    return CliSettings(**overrides)


def _options(args: argparse.Namespace, settings: CliSettings, ts_config: Path | None) -> StartOptions:
    return StartOptions(
        model_store=args.model_store.absolute() if args.model_store is not None else None,
        workflow_store=args.workflow_store.absolute() if args.workflow_store is not None else None,
        models=",".join(args.models) if args.models else None,
        ts_config=ts_config,
        disable_token_auth=args.disable_token_auth,
        enable_model_api=args.enable_model_api,
    )


def _demo(args: argparse.Namespace, settings: CliSettings) -> int:
    """Build ``demo.mar`` (with the worker's torch, in a subprocess) and serve it in the foreground."""
    store = settings.home.absolute() / "model-store"
    built = subprocess.run([sys.executable, "-m", "sluice_worker.demo_model", str(store)], check=False)
    if built.returncode != 0:
        output.error("could not build the demo model")
        return 1
    settings = dataclasses.replace(settings, model_store=store, load_models="demo=demo.mar")
    options = StartOptions(
        model_store=store,
        models="demo=demo.mar",
        ts_config=_ts_config(args.ts_config),
        disable_token_auth=args.disable_token_auth,
        enable_model_api=args.enable_model_api,
    )
    return start(settings, options, os.environ, foreground=True, fresh=args.ncs)
