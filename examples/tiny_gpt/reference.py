"""Expected tiny_gpt output, computed in-process, and an in-process continuous-batching driver.

- :func:`generate` is what a server must stream for one request: one ``str`` per token (one ASCII
  character each; a generation that stops at EOS ends with ``""``). Tests compare every streamed token
  with it.
- :func:`drive` runs requests through the continuous-batching handler (``handler.TinyGPTHandler``) with
  TorchServe's ``ContinuousBatching`` schedule and no server: all requests are queued at the start; before
  every iteration queued requests fill the free slots (up to ``batch_size`` running), in order; the batch
  holds the running requests (as ``{}``, oldest first) then the new ones (with their JSON body); after the
  iteration each request's stopping criterion decides whether it leaves. It records when every token came
  back: the model-only baseline a benchmark compares a server against.
"""

import functools
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import ts
from ts.context import Context, RequestProcessor

from examples.tiny_gpt import model
from examples.tiny_gpt.handler import TinyGPTHandler

SERIALIZED_FILE = "tiny_gpt.pt"


@functools.cache
def load_model(seed: int = model.DEFAULT_SEED) -> model.TinyGPT:
    """The model for ``seed`` (built once per process; nothing mutates it)."""
    return model.TinyGPT.from_seed(seed)


def generate(prompt: str | bytes, max_new_tokens: int, *, seed: int = model.DEFAULT_SEED) -> list[str]:
    """The tokens a server streams for this request, alone, with greedy decoding (``ValueError`` for a
    request the model refuses)."""
    gpt = load_model(seed)
    generation = model.start(prompt, max_new_tokens)
    while not generation.done:
        model.step(gpt, [generation])
    return generation.texts


@dataclass(frozen=True)
class DriverRun:
    """What :func:`drive` measured; times are seconds since the run started (``time.perf_counter``)."""

    tokens: list[list[str]]  # per request, as streamed
    token_times: list[list[float]]  # per request, when each token came back from its iteration
    admitted: list[float]  # per request, when the iteration it joined started
    batch_sizes: list[int]  # requests in each iteration
    elapsed: float


class _NoMetrics:
    """``context.metrics`` for the driver: BaseHandler.handle records its HandlerTime here."""

    def add_time(self, *args: Any, **kwargs: Any) -> None:
        return None


def write_weights(model_dir: Path, *, seed: int = model.DEFAULT_SEED) -> Path:
    """``<model_dir>/tiny_gpt.pt``: the seed's state dict, as the archive ships it."""
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / SERIALIZED_FILE
    torch.save(model.build_state_dict(seed), path)
    return path


def handler_context(
    model_dir: Path, *, batch_size: int = 8, max_new_tokens: int = 32, model_name: str = "tiny_gpt"
) -> Context:
    """A ``ts.context.Context`` as TorchServe builds it for a model folder holding ``tiny_gpt.pt``."""
    manifest = {
        "runtime": "python",
        "model": {"modelName": model_name, "serializedFile": SERIALIZED_FILE, "handler": "handler.py"},
    }
    return Context(
        model_name,
        str(model_dir),
        manifest,
        batch_size,
        None,
        ts.__version__,
        metrics=_NoMetrics(),
        model_yaml_config={"handler": {"max_new_tokens": max_new_tokens}},
    )


def drive(
    requests: Sequence[tuple[str | bytes, int]], *, batch_size: int = 8, seed: int = model.DEFAULT_SEED
) -> DriverRun:
    """Run ``(prompt, max_new_tokens)`` requests through the continuous-batching handler in-process."""
    with tempfile.TemporaryDirectory(prefix="tiny-gpt-") as folder:
        write_weights(Path(folder), seed=seed)
        context = handler_context(Path(folder), batch_size=batch_size)
        handler = TinyGPTHandler()
        handler.initialize(context)
    bodies = [_body(prompt, budget) for prompt, budget in requests]
    tokens: list[list[str]] = [[] for _ in requests]
    token_times: list[list[float]] = [[] for _ in requests]
    admitted = [0.0 for _ in requests]
    batch_sizes: list[int] = []
    queued = list(range(len(requests)))
    running: list[int] = []
    start = time.perf_counter()
    while queued or running:
        now = time.perf_counter() - start
        newcomers = queued[: batch_size - len(running)]
        del queued[: len(newcomers)]
        for index in newcomers:
            admitted[index] = now
        batch = running + newcomers
        data = [{} if index in running else bodies[index] for index in batch]
        context.request_ids = {idx: f"req-{index}" for idx, index in enumerate(batch)}
        context.request_processor = [RequestProcessor({}) for _ in batch]
        outputs = handler.handle(data, context)
        done_at = time.perf_counter() - start
        batch_sizes.append(len(batch))
        running = []
        for idx, index in enumerate(batch):
            code, phrase = context.get_response_status(idx)
            if code != 200:
                raise ValueError(f"request {index} was refused: {phrase}")
            tokens[index].append(outputs[idx])
            token_times[index].append(done_at)
            if not context.stopping_criteria[idx](outputs[idx]):
                running.append(index)
    return DriverRun(tokens, token_times, admitted, batch_sizes, time.perf_counter() - start)


def _body(prompt: str | bytes, max_new_tokens: int) -> dict[str, Any]:
    """The row TorchServe makes of a new request: a REST JSON body for a str prompt, gRPC inputs for
    bytes."""
    if isinstance(prompt, str):
        return {"body": {"prompt": prompt, "max_new_tokens": max_new_tokens}}
    return {"data": bytearray(prompt), "max_new_tokens": bytearray(str(max_new_tokens).encode())}
