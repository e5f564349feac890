"""The tools a benchmark run needs beside Sluice's venv, installed on first use:

- TorchServe 0.12 in its own venv ``bench/.torchserve-venv`` (gitignored): ``torchserve==0.12.0`` and
  ``torch==2.13.0`` (pip takes the CPU build this machine keeps locally), plus py-spy for profiles.
- Java 17 (Debian ``openjdk-17-jre-headless``) for TorchServe's frontend.
- h2load (Debian ``nghttp2-client``), the native HTTP/2 load generator.

And the record of the machine and tools a run used (:func:`environment`).
"""

import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import collectors, h2load
from bench.matrix import Plan

BENCH_DIR = Path(__file__).parent
TORCHSERVE_VENV = BENCH_DIR / ".torchserve-venv"
TORCHSERVE_REQUIREMENTS = ["torchserve==0.12.0", "torch==2.13.0", "numpy", "pyyaml", "py-spy==0.4.3"]
INSTALL_TIMEOUT_S = 1800


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def java_version() -> str:
    """The first line ``java -version`` prints, or "" without Java."""
    if shutil.which("java") is None:
        return ""
    done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30, check=False)
    lines = (done.stderr or done.stdout).splitlines()
    return lines[0] if lines else ""


def _apt_install(*packages: str) -> bool:
    if shutil.which("apt-get") is None:
        return False
    _log(f"installing {' '.join(packages)} from Debian's packages")
    update = subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=600, check=False)
    if update.returncode != 0:
        return False
    done = subprocess.run(
        ["apt-get", "install", "-y", "-qq", *packages],
        capture_output=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    return done.returncode == 0


def ensure_java() -> str:
    version = java_version()
    if '"17' not in version and not version.startswith("openjdk 17"):
        _apt_install("openjdk-17-jre-headless")
        version = java_version()
    return version


def ensure_h2load() -> bool:
    if shutil.which("h2load") is None:
        _apt_install("nghttp2-client")
    return shutil.which("h2load") is not None


def ensure_torchserve_venv(venv: Path = TORCHSERVE_VENV) -> Path:
    """The TorchServe venv, created and filled if ``torchserve`` is missing from it."""
    if (venv / "bin" / "torchserve").exists() and (venv / "bin" / "py-spy").exists():
        return venv
    _log(f"creating {venv} with {' '.join(TORCHSERVE_REQUIREMENTS)}")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *TORCHSERVE_REQUIREMENTS],
        check=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    return venv


def py_spy() -> str | None:
    """A py-spy binary: the TorchServe venv's, else one on PATH."""
    candidate = TORCHSERVE_VENV / "bin" / "py-spy"
    if candidate.exists():
        return str(candidate)
    return shutil.which("py-spy")


def environment(plan: Plan, phase: str) -> dict[str, Any]:
    """The ``env`` record written at the start and the end of a run."""
    return {
        "kind": "env",
        "phase": phase,
        "plan": plan.name,
        "time_unix": time.time(),
        "cpus": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "load_average": collectors.load_average(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "java": java_version() if plan.with_torchserve else "",
        "h2load": h2load.available(),
        "reps": plan.reps,
    }
