"""Serve the metrics test archive (tests/support/metrics_archive.py) on TorchServe 0.12 with
``metrics_mode=prometheus``, send its requests, and write what TorchServe's metrics port shows for its
families to ``tests/e2e/torchserve_observed/handler_metrics.prom``: the observation
``tests/e2e/test_handler_metrics.py`` compares Sluice with.

    .venv/bin/python scripts/observe_torchserve_metrics.py     (builds bench/.torchserve-venv if missing)
"""

import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.servers.torchserve import TorchServeServer  # noqa: E402
from bench.tools import ensure_torchserve_venv  # noqa: E402
from tests.support import metrics_archive  # noqa: E402

OUT = ROOT / "tests" / "e2e" / "torchserve_observed" / "handler_metrics.prom"
WAIT_S = 60.0


def main() -> None:
    venv = ensure_torchserve_venv()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        store = work / "store"
        store.mkdir()
        metrics_archive.archive(store)
        config = metrics_archive.metrics_config(work)
        server = TorchServeServer(
            venv,
            work,
            store,
            properties={
                "metrics_mode": "prometheus",
                "metrics_config": str(config),
                "model_metrics_auto_detect": "true",
                # Seconds between system metric collections (60 by default).
                "metric_time_interval": "2",
            },
        )
        server.start([metrics_archive.MODEL])
        try:
            for body in metrics_archive.BODIES:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{server.ports.rest}/predictions/{metrics_archive.MODEL}",
                    data=body.encode(),
                    headers={"Content-Type": "text/plain"},
                )
                with urllib.request.urlopen(request, timeout=30) as response:
                    assert response.read() == b"ok"
            text = _scrape(server.ports.metrics)
        finally:
            server.stop()
    OUT.write_text(text)
    print(f"wrote {OUT}")


def _scrape(port: int) -> str:
    """The metrics body once every request's metrics and the system metrics are in (the frontend
    reads worker lines asynchronously and collects system metrics every metric_time_interval)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text: str = response.read().decode()
        done = "\nCPUUtilization{" in text and any(
            line.startswith("MeteredRequests{") and line.endswith(f" {float(len(metrics_archive.BODIES))}")
            for line in text.splitlines()
        )
        if done or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


if __name__ == "__main__":
    main()
