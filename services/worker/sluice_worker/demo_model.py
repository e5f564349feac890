"""The demo model: ``python -m sluice_worker.demo_model <model-store-dir> [--force]``.

Builds, in code, a small TorchScript MLP (4 numbers in, 3 class scores out, fixed seed, untrained)
and writes ``demo.mar`` into the model store as torch-model-archiver 0.12 would: a deflated zip with
the files at the root (``model.pt``, the handler, ``index_to_name.json``, ``model-config.yaml``) and
``MAR-INF/MANIFEST.json``. The handler is an ordinary TorchServe ``BaseHandler`` subclass. An existing
``demo.mar`` is kept unless ``--force`` is given.

Try it: ``PredictionsRequest(model_name="demo", input={"data": b"[5.1, 3.5, 1.4, 0.2]"})``.
"""

import argparse
import datetime
import io
import json
import os
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

import torch

MODEL_NAME = "demo"
MODEL_VERSION = "1.0"
ARCHIVE_NAME = f"{MODEL_NAME}.mar"
FEATURES = 4
LABELS = ("setosa", "versicolor", "virginica")

HANDLER_FILE = "demo_handler.py"
HANDLER_SOURCE = '''"""Sluice demo handler: scores rows of 4 numbers with a TorchScript MLP (BaseHandler)."""

import json

import torch
from ts.torch_handler.base_handler import BaseHandler
from ts.utils.util import PredictionException

FEATURES = 4


class DemoHandler(BaseHandler):
    """Each request row is JSON (``[5.1, 3.5, 1.4, 0.2]`` or ``{"data": [...]}``) or ``"5.1,3.5,1.4,0.2"``."""

    def preprocess(self, data):
        return torch.tensor([_features(row) for row in data], dtype=torch.float32, device=self.device)

    def postprocess(self, data):
        mapping = self.mapping or {}
        answers = []
        for scores in torch.softmax(data, dim=1).tolist():
            best = max(range(len(scores)), key=scores.__getitem__)
            answers.append(
                {"label": mapping.get(str(best), str(best)), "probabilities": [round(p, 6) for p in scores]}
            )
        return answers


def _features(row):
    value = row
    if isinstance(row, dict):
        value = next((row[key] for key in ("data", "body", "input") if key in row), None)
        if value is None:
            value = next(iter(row.values()), b"")
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text)
        except ValueError:
            value = text.split(",")
    if isinstance(value, dict):
        value = value.get("data", value.get("inputs"))
    try:
        numbers = [float(item) for item in value]
    except (TypeError, ValueError):
        raise PredictionException(f"expected {FEATURES} numbers, e.g. [5.1, 3.5, 1.4, 0.2]", 400) from None
    if len(numbers) != FEATURES:
        raise PredictionException(f"expected {FEATURES} numbers, got {len(numbers)}", 400)
    return numbers
'''

MODEL_CONFIG = """# Read by Sluice (and TorchServe) when the model is registered.
minWorkers: 1
maxWorkers: 1
batchSize: 8
maxBatchDelay: 10
responseTimeout: 30
"""


def build_model() -> bytes:
    """The TorchScript MLP, serialized (deterministic: fixed seed)."""
    generator = torch.Generator().manual_seed(0)
    layers = [torch.nn.Linear(FEATURES, 16), torch.nn.ReLU(), torch.nn.Linear(16, len(LABELS))]
    with torch.no_grad():
        for layer in layers:
            if isinstance(layer, torch.nn.Linear):
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator) * 0.5)
                layer.bias.zero_()
    model = torch.nn.Sequential(*layers).eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated upstream; TorchServe still loads it
        torch.jit.save(torch.jit.script(model), buffer)
    return buffer.getvalue()


def manifest() -> str:
    """MANIFEST.json exactly as torch-model-archiver 0.12.0 writes it."""
    return json.dumps(
        {
            "createdOn": datetime.datetime.now().strftime("%d/%m/%Y %H:%M:%S"),
            "runtime": "python",
            "model": {
                "modelName": MODEL_NAME,
                "serializedFile": "model.pt",
                "handler": HANDLER_FILE,
                "modelVersion": MODEL_VERSION,
                "configFile": "model-config.yaml",
            },
            "archiverVersion": "0.12.0",
        },
        indent=2,
    )


def write_archive(model_store: Path, *, force: bool = False) -> Path:
    """Write ``demo.mar`` into ``model_store`` (atomically) unless it is there already."""
    target = model_store / ARCHIVE_NAME
    if target.exists() and not force:
        return target
    model_store.mkdir(parents=True, exist_ok=True)
    files = {
        HANDLER_FILE: HANDLER_SOURCE.encode(),
        "model.pt": build_model(),
        "index_to_name.json": json.dumps({str(i): label for i, label in enumerate(LABELS)}).encode(),
        "model-config.yaml": MODEL_CONFIG.encode(),
        "MAR-INF/MANIFEST.json": manifest().encode(),
    }
    fd, temp_name = tempfile.mkstemp(prefix=".demo-", suffix=".mar", dir=model_store)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, content in files.items():
                archive.writestr(name, content)
        os.chmod(temp_name, 0o644)
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sluice_worker.demo_model", description=__doc__.split("\n")[0]
    )
    parser.add_argument("model_store", type=Path, help="model store folder to write demo.mar into")
    parser.add_argument("--force", action="store_true", help="rebuild demo.mar even if it exists")
    args = parser.parse_args(argv)
    existed = (args.model_store / ARCHIVE_NAME).exists()
    path = write_archive(args.model_store, force=args.force)
    print(f"{'kept' if existed and not args.force else 'wrote'} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
