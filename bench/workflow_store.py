"""The archives of the workflow benchmark (``bench/workflows.py``), in one folder that both servers use as
their model store and their workflow store, so that each serves the same bytes:

- ``pipe.war`` (torch-workflow-archiver 0.2.15): the DAG ``pre -> cnn -> post``; ``pre`` and ``post``
  are functions of ``handler/pipe_nodes.py``, ``cnn`` is the model ``cnn.mar``.
- ``cnn.mar``: the benchmark CNN (``models.py``: the ResNet-18-shaped TorchScript file of ``make bench``)
  with ``handler/bench_handler.py``, fed 3x32x32 inputs (its ``input_shape``), ``batchSize`` 8,
  ``maxBatchDelay`` 5 ms, one worker.
- ``pre.mar`` and ``post.mar``: the two functions as plain models (handler ``pipe_nodes:pre`` /
  ``pipe_nodes:post``), for the client that chains the three calls itself.

Also: the request every call sends (one image as JSON) and the answer the pipeline gives for it,
computed in this process from the same weights and functions.
"""

import json
import logging
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.handler import pipe_nodes
from bench.models import HANDLER_FILE, MODEL_VERSION, Variant, build_weights

HANDLER_DIR = Path(__file__).parent / "handler"
NODES_FILE = HANDLER_DIR / "pipe_nodes.py"
WORKFLOW = "pipe"
PRE, CNN, POST = "pre", "cnn", "post"
MODELS = (PRE, CNN, POST)
IMAGE_SHAPE = pipe_nodes.SHAPE
CNN_BATCH_SIZE = 8
MAX_BATCH_DELAY_MS = 5
NODE_TIMEOUT_MS = 10_000
# Of the first 32 images, the one whose top two logits are furthest apart (the random-weight CNN's
# logits lie close together: 0.031 here, 0.002 for image 0).
IMAGE_SEED = 6
WORKFLOW_ARCHIVER = Path(sys.executable).parent / "torch-workflow-archiver"

SPEC = textwrap.dedent(f"""\
    models:
      min-workers: 1
      max-workers: 1
      batch-size: 1
      max-batch-delay: {MAX_BATCH_DELAY_MS}
      retry-attempts: 1
      timeout-ms: {NODE_TIMEOUT_MS}
      {CNN}:
        url: {CNN}.mar
        batch-size: {CNN_BATCH_SIZE}
        max-batch-delay: {MAX_BATCH_DELAY_MS}
    dag:
      {PRE}: [{CNN}]
      {CNN}: [{POST}]
    """)


def cnn_config() -> dict[str, Any]:
    """model-config.yaml of ``cnn.mar``: the CNN bench's batch-8 settings, 3x32x32 inputs."""
    config = Variant("cnn", batch_size=CNN_BATCH_SIZE, max_batch_delay_ms=MAX_BATCH_DELAY_MS).model_config()
    config["handler"]["input_shape"] = list(IMAGE_SHAPE)
    return config


def function_config() -> dict[str, Any]:
    """model-config.yaml of ``pre.mar`` and ``post.mar``: the workflow's settings for its functions."""
    return {
        "minWorkers": 1,
        "maxWorkers": 1,
        "batchSize": 1,
        "maxBatchDelay": MAX_BATCH_DELAY_MS,
        "responseTimeout": 120,
    }


def build_store(store: Path, work: Path) -> dict[str, Path]:
    """Every archive, rebuilt; name -> path."""
    from model_archiver.model_archiver_config import ModelArchiverConfig
    from model_archiver.model_packaging import generate_model_archive

    store.mkdir(parents=True, exist_ok=True)
    weights = build_weights("cnn", work / "weights" / "cnn.pt")
    configs = work / "configs"
    logging.getLogger().setLevel(logging.WARNING)  # the archiver logs every file at INFO
    for name, handler, config, serialized in (
        (CNN, str(HANDLER_FILE), cnn_config(), str(weights)),
        # "<file without .py>:<function>": the archiver copies the file, the manifest names the function.
        (PRE, f"{NODES_FILE.with_suffix('')}:pre", function_config(), None),
        (POST, f"{NODES_FILE.with_suffix('')}:post", function_config(), None),
    ):
        config_path = configs / name / "model-config.yaml"
        config_path.parent.mkdir(parents=True, exist_ok=True)
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        generate_model_archive(
            ModelArchiverConfig(
                model_name=name,
                handler=handler,
                version=MODEL_VERSION,
                serialized_file=serialized,
                config_file=str(config_path),
                export_path=str(store),
                force=True,
            )
        )
    spec = configs / f"{WORKFLOW}.yaml"
    spec.write_text(SPEC)
    subprocess.run(
        [
            str(WORKFLOW_ARCHIVER),
            "--workflow-name", WORKFLOW,
            "--spec-file", str(spec),
            "--handler", str(NODES_FILE),
            "--export-path", str(store),
            "--force",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    return {name: store / f"{name}.mar" for name in MODELS} | {WORKFLOW: store / f"{WORKFLOW}.war"}


@dataclass(frozen=True)
class Request:
    """The one request every call sends, and what the pipeline answers for it."""

    body: bytes
    expected_class: int
    expected_score: float
    # The expected class's logit minus the runner-up's (a batch's rounding cannot swap them).
    margin: float


def image(seed: int) -> np.ndarray[Any, Any]:
    generator = np.random.default_rng(seed)
    values: np.ndarray[Any, Any] = generator.uniform(0.0, 1.0, size=IMAGE_SHAPE).round(4)
    return values


def request(weights: Path, seed: int = IMAGE_SEED) -> Request:
    """The request ``{"image": [...]}`` of image ``seed`` and its answer, computed in this process."""
    import torch

    body = json.dumps({"image": image(seed).tolist()}, separators=(",", ":")).encode()
    module = torch.jit.load(str(weights)).eval()  # type: ignore[no-untyped-call]
    tensor = torch.frombuffer(bytearray(pipe_nodes.preprocess_image(body)), dtype=torch.float32)
    with torch.no_grad():
        logits = module(tensor.reshape(1, *IMAGE_SHAPE))[0]
    answer = pipe_nodes.top_class(logits.numpy().astype("<f4").tobytes())
    top_two = torch.topk(logits, 2).values
    return Request(body, answer["class"], answer["score"], float(top_two[0] - top_two[1]))
