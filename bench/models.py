"""The benchmark models, built in code (no downloads), and their ``.mar`` archives.

- ``mlp``: 64 -> 256 -> 256 -> 10 (ReLU), TorchScript (scripted), fixed seed.
- ``cnn``: ResNet-18-shaped (BasicBlocks [2, 2, 2, 2], 64..512 channels), 3x224x224 -> 1000, random
  weights, TorchScript (traced).
- ``stream``: the mlp file with a handler that streams ``stream_messages`` intermediate answers.
- ``idle``: the mlp without worker settings, registered many times with no worker (cost of idle models).
- ``big1``, ``big4``, ``big16``: 1, 4 and 16 MiB float32 inputs reduced to their mean (TorchScript), so
  the time goes to carrying the input, not to the model (``make bench-large``).

Every archive is written by torch-model-archiver 0.12 (its Python API, in process) with the one
handler ``bench/handler/bench_handler.py``; the per-model settings live in the archive's
model-config.yaml, which both TorchServe and Sluice read (Sluice also reads ``batchPolicy``).
Torch is imported only by the builders.
"""

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HANDLER_FILE = Path(__file__).parent / "handler" / "bench_handler.py"
MODEL_VERSION = "1.0"
SHAPES: dict[str, tuple[int, ...]] = {
    "mlp": (64,),
    "cnn": (3, 224, 224),
    "stream": (64,),
    "idle": (64,),
    "big1": (256 * 1024,),
    "big4": (1024 * 1024,),
    "big16": (4 * 1024 * 1024,),
}
# The TorchScript file each kind is built from.
WEIGHTS = {
    "mlp": "mlp",
    "cnn": "cnn",
    "stream": "mlp",
    "idle": "mlp",
    "big1": "mean",
    "big4": "mean",
    "big16": "mean",
}
DEFAULT_JOB_QUEUE_SIZE = 1000


@dataclass(frozen=True)
class Variant:
    """One archive: a model kind with its batching and worker settings."""

    kind: str
    batch_size: int = 1
    max_batch_delay_ms: int = 5
    # Sluice's batch policy (TorchServe ignores the key): fill waits up to the delay, eager does not.
    policy: str = "fill"
    workers: int = 1
    job_queue_size: int = DEFAULT_JOB_QUEUE_SIZE
    stream_messages: int = 0
    stream_gap_ms: float = 0.0

    @property
    def batching(self) -> str:
        """``off`` (batch size 1), else the policy: ``fill`` or ``eager``."""
        return "off" if self.batch_size == 1 else self.policy

    @property
    def name(self) -> str:
        if self.kind in ("stream", "idle"):
            return self.kind
        base = f"{self.kind}_b{self.batch_size}_w{self.workers}"
        return base if self.batch_size == 1 else f"{base}_{self.policy}"

    @property
    def shape(self) -> tuple[int, ...]:
        return SHAPES[self.kind]

    def model_config(self) -> dict[str, Any]:
        """model-config.yaml as a mapping."""
        config: dict[str, Any] = {
            "batchSize": self.batch_size,
            "maxBatchDelay": self.max_batch_delay_ms,
            "batchPolicy": self.policy,
            "jobQueueSize": self.job_queue_size,
            "responseTimeout": 120,
            "handler": {
                "input_shape": list(self.shape),
                "stream_messages": self.stream_messages,
                "stream_gap_ms": self.stream_gap_ms,
            },
            # Sluice's KServe v2 tensor mode: rows are torch tensors, no JSON round trip.
            "sluice": {"tensor_handler": True, "tensor_library": "torch"},
        }
        if self.kind != "idle":
            config["minWorkers"] = self.workers
            config["maxWorkers"] = self.workers
        return config

    def model_config_yaml(self) -> str:
        return yaml.safe_dump(self.model_config(), sort_keys=False)


def build_weights(kind: str, path: Path) -> Path:
    """Write the TorchScript file of ``kind`` (``mlp``, ``cnn`` or ``mean``) to ``path`` unless it exists."""
    if path.exists():
        return path
    import warnings

    import torch

    torch.manual_seed(0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated upstream; TorchServe 0.12 loads it
        if kind == "mlp":
            module = torch.jit.script(_mlp().eval())
        elif kind == "cnn":
            module = torch.jit.trace(_resnet18_shaped().eval(), torch.zeros(1, *SHAPES["cnn"]))  # type: ignore[no-untyped-call]
        elif kind == "mean":
            module = torch.jit.script(_mean().eval())
        else:
            raise ValueError(f"no weights for {kind!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_suffix(".tmp")
        torch.jit.save(module, str(temp))
        temp.replace(path)
    return path


def _mean() -> Any:
    import torch
    import torch.nn as nn

    class Mean(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.mean(dim=-1, keepdim=True)

    return Mean()


def _mlp() -> Any:
    import torch.nn as nn

    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def _resnet18_shaped() -> Any:
    import torch.nn as nn

    class BasicBlock(nn.Module):
        def __init__(self, inplanes: int, planes: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.downsample: nn.Module = nn.Identity()
            if stride != 1 or inplanes != planes:
                self.downsample = nn.Sequential(
                    nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
                )

        def forward(self, x: Any) -> Any:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + self.downsample(x))

    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    inplanes = 64
    for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes, 1)]
        inplanes = planes
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)


def write_archive(variant: Variant, store: Path, weights_dir: Path) -> Path:
    """``<store>/<variant.name>.mar`` written by torch-model-archiver; kept when its inputs are the same."""
    from model_archiver.model_archiver_config import ModelArchiverConfig
    from model_archiver.model_packaging import generate_model_archive

    weights = build_weights(WEIGHTS[variant.kind], weights_dir / f"{WEIGHTS[variant.kind]}.pt")
    config_path = weights_dir / "configs" / variant.name / "model-config.yaml"
    config_text = variant.model_config_yaml()
    target = store / f"{variant.name}.mar"
    stamp = store / f".{variant.name}.mar.sha256"
    fingerprint = _fingerprint(HANDLER_FILE.read_bytes(), config_text.encode(), weights)
    if target.exists() and stamp.exists() and stamp.read_text() == fingerprint:
        return target
    store.mkdir(parents=True, exist_ok=True)
    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text(config_text)
    logging.getLogger().setLevel(logging.WARNING)  # the archiver logs every file at INFO
    generate_model_archive(
        ModelArchiverConfig(
            model_name=variant.name,
            handler=str(HANDLER_FILE),
            version=MODEL_VERSION,
            serialized_file=str(weights),
            config_file=str(config_path),
            export_path=str(store),
            force=True,
        )
    )
    stamp.write_text(fingerprint)
    return target


def _fingerprint(handler: bytes, config: bytes, weights: Path) -> str:
    digest = hashlib.sha256()
    for part in (handler, config, weights.read_bytes()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()


def build_archives(variants: list[Variant], store: Path, weights_dir: Path) -> dict[str, Path]:
    """Every variant's archive, by variant name."""
    return {variant.name: write_archive(variant, store, weights_dir) for variant in variants}


def manifest_of(archive: Path) -> dict[str, Any]:
    """MAR-INF/MANIFEST.json of an archive (for checks and the report)."""
    import zipfile

    with zipfile.ZipFile(archive) as zipped:
        loaded: dict[str, Any] = json.loads(zipped.read("MAR-INF/MANIFEST.json"))
        return loaded
