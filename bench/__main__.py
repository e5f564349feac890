"""``python -m bench [--preset full|quick|smoke]``: run the benchmark, write
``bench/results/<timestamp>/`` (results.jsonl, report.md, plots/)."""

import argparse
import os
import sys
import time
from pathlib import Path

from bench import presets, report, tools
from bench.runner import Runner, log

BENCH_DIR = Path(__file__).parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--preset", choices=("full", "quick", "smoke"), default="quick")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/<timestamp>)")
    parser.add_argument("--work", type=Path, default=BENCH_DIR / ".work", help="archives and server folders")
    parser.add_argument("--no-torchserve", action="store_true", help="Sluice and the in-process limit only")
    parser.add_argument(
        "--only",
        action="append",
        metavar="PREFIX",
        help="only the server groups whose label starts so (e.g. cnn)",
    )
    parser.add_argument("--report-only", type=Path, metavar="DIR", help="rebuild report and plots of a run")
    args = parser.parse_args(argv)
    if args.report_only:
        report.write(args.report_only)
        return 0
    plan = presets.plan(args.preset)
    if args.only:
        plan = presets.only(plan, args.only)
    venv = None
    if plan.with_torchserve and not args.no_torchserve:
        java = tools.ensure_java()
        try:
            venv = tools.ensure_torchserve_venv()
        except Exception as exc:  # no TorchServe: still measure Sluice, and say so in the report
            log(f"TorchServe venv unavailable: {exc}")
        if not java or venv is None:
            plan = plan.without_torchserve()
    else:
        plan = plan.without_torchserve()
    if plan.with_h2load and not tools.ensure_h2load():
        plan = plan.without_h2load()
    out = args.out or BENCH_DIR / "results" / time.strftime("%Y%m%d-%H%M%S")
    log(f"preset {plan.name}: {len(plan.groups)} server starts; results in {out}")
    Runner(plan, out, args.work.absolute(), torchserve_venv=venv).run()
    written = report.write(out)
    log(f"report: {written}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
