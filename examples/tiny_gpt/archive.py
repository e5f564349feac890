"""tiny_gpt's model archives: ``python -m examples.tiny_gpt.archive <model-store-dir> [--force]``.

Writes, with the real torch-model-archiver 0.12 (run as ``python -m model_archiver.model_packaging``):

- ``tiny_gpt.mar``: the continuous-batching handler (``continuousBatching: true``, ``batchSize: 8``,
  ``maxBatchDelay: 5``);
- ``tiny_gpt_async.mar``: the async handler (``asyncCommunication: true``);
- ``tiny_gpt_plain.mar`` (only when asked for by name: ``build_archive(store, "tiny_gpt_plain")``, not
  built by ``build_archives`` or the command line): the plain streaming handler (``batchSize: 1``, no
  continuous batching: one request per handler call, its tokens sent as intermediate responses), the
  baseline of ``make bench-generate``.

All have one worker (``minWorkers``/``maxWorkers`` 1), ``handler: {max_new_tokens: 32}``, the seed's weights
as the serialized file ``tiny_gpt.pt`` and the model code as extra files at the archive root:
``tiny_gpt_model.py`` (``model.py``) and ``tiny_gpt_forms.py`` (``forms.py``); and Sluice's warm-up
(``warmupRequests: tiny_gpt_warmup.json``: two short generations each worker runs before READY,
which TorchServe ignores). The handlers are
``tiny_gpt_handler.py``, ``tiny_gpt_async_handler.py`` and ``tiny_gpt_stream_handler.py``: distinct module
names, so the archives (and
other models' ``handler.py``/``model.py``) can be imported in one process. An existing archive is kept
unless ``--force`` is given.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from examples.tiny_gpt import model

HERE = Path(__file__).resolve().parent
CB_MODEL = "tiny_gpt"
ASYNC_MODEL = "tiny_gpt_async"
PLAIN_MODEL = "tiny_gpt_plain"
MODEL_VERSION = "1.0"
SERIALIZED_FILE = "tiny_gpt.pt"
CONFIG_FILE = "model-config.yaml"
# Archive file name -> source file in this package.
SHARED_FILES = {"tiny_gpt_model.py": "model.py", "tiny_gpt_forms.py": "forms.py"}
# Requests each worker runs through the handler before it reports READY (Sluice's warmupRequests).
WARMUP_FILE = "tiny_gpt_warmup.json"
WARMUP_REQUESTS = '[{"prompt": "warm up", "max_new_tokens": 2}, {"prompt": "Hello", "max_new_tokens": 1}]\n'
HANDLERS = {
    CB_MODEL: ("tiny_gpt_handler.py", "handler.py"),
    ASYNC_MODEL: ("tiny_gpt_async_handler.py", "async_handler.py"),
    PLAIN_MODEL: ("tiny_gpt_stream_handler.py", "stream_handler.py"),
}


def model_config(
    name: str,
    *,
    batch_size: int = 8,
    max_batch_delay_ms: int = 5,
    max_new_tokens: int = 32,
    step_delay_ms: int = 0,
) -> str:
    """The archive's model-config.yaml."""
    if name == CB_MODEL:
        mode = [
            f"batchSize: {batch_size}",
            f"maxBatchDelay: {max_batch_delay_ms}",
            "# handle() runs once per generated token with every running request plus new ones.",
            "continuousBatching: true",
        ]
    elif name == ASYNC_MODEL:
        mode = [
            "# handle() is a coroutine per request; tokens go out as intermediate responses.",
            "asyncCommunication: true",
        ]
    elif name == PLAIN_MODEL:
        mode = [
            "# handle() generates every token of one request; all but the last go out as intermediate",
            "# responses. No continuous batching: the worker serves one stream at a time.",
            "batchSize: 1",
        ]
    else:
        raise ValueError(f"unknown tiny_gpt archive {name!r}")
    lines = [
        f"# {name}: a tiny byte-level generative model (examples/tiny_gpt), greedy decoding on CPU.",
        "minWorkers: 1",
        "maxWorkers: 1",
        *mode,
        "# Sluice runs these requests through the handler before the worker reports READY.",
        f"warmupRequests: {WARMUP_FILE}",
        "handler:",
        "  # Used when a request names no max_new_tokens (v2: max_tokens).",
        f"  max_new_tokens: {max_new_tokens}",
    ]
    if step_delay_ms:
        lines += [
            "  # Tests: every token takes this much longer (a slower model).",
            f"  step_delay_ms: {step_delay_ms}",
        ]
    return "\n".join(lines) + "\n"


def build_archive(
    store: Path,
    name: str,
    *,
    batch_size: int = 8,
    max_batch_delay_ms: int = 5,
    max_new_tokens: int = 32,
    step_delay_ms: int = 0,
    seed: int = model.DEFAULT_SEED,
    force: bool = False,
) -> Path:
    """``<store>/<name>.mar`` (``name``: ``tiny_gpt``, ``tiny_gpt_async`` or ``tiny_gpt_plain``), written
    atomically. ``batch_size`` and ``max_batch_delay_ms`` apply to ``tiny_gpt`` alone."""
    config = model_config(
        name,
        batch_size=batch_size,
        max_batch_delay_ms=max_batch_delay_ms,
        max_new_tokens=max_new_tokens,
        step_delay_ms=step_delay_ms,
    )
    target = store / f"{name}.mar"
    if target.exists() and not force:
        return target
    store.mkdir(parents=True, exist_ok=True)
    handler_name, handler_source = HANDLERS[name]
    with tempfile.TemporaryDirectory(prefix="tiny-gpt-archive-") as folder:
        staging = Path(folder)
        src, out, scratch = staging / "src", staging / "out", staging / "tmp"
        for path in (src, out, scratch):
            path.mkdir()
        shutil.copyfile(HERE / handler_source, src / handler_name)
        for archived, source in SHARED_FILES.items():
            shutil.copyfile(HERE / source, src / archived)
        torch.save(model.build_state_dict(seed), src / SERIALIZED_FILE)
        (src / CONFIG_FILE).write_text(config)
        (src / WARMUP_FILE).write_text(WARMUP_REQUESTS)
        extra_files = [*(src / archived for archived in SHARED_FILES), src / WARMUP_FILE]
        command = [
            sys.executable, "-m", "model_archiver.model_packaging",
            "--model-name", name,
            "--version", MODEL_VERSION,
            "--serialized-file", str(src / SERIALIZED_FILE),
            "--handler", str(src / handler_name),
            "--extra-files", ",".join(str(path) for path in extra_files),
            "--config-file", str(src / CONFIG_FILE),
            "--export-path", str(out),
        ]  # fmt: skip
        # The archiver stages files in $TMPDIR/<model name>: a private TMPDIR keeps parallel builds apart.
        result = subprocess.run(
            command, env={**os.environ, "TMPDIR": str(scratch)}, capture_output=True, text=True, check=False
        )
        built = out / f"{name}.mar"
        if result.returncode != 0 or not built.exists():
            raise RuntimeError(
                f"torch-model-archiver failed for {name}: {result.stderr.strip() or result.stdout}"
            )
        fd, partial = tempfile.mkstemp(prefix=f".{name}-", suffix=".mar", dir=store)
        os.close(fd)
        try:
            shutil.copyfile(built, partial)
            os.chmod(partial, 0o644)
            os.replace(partial, target)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
    return target


def build_archives(
    store: Path,
    *,
    batch_size: int = 8,
    max_batch_delay_ms: int = 5,
    max_new_tokens: int = 32,
    step_delay_ms: int = 0,
    seed: int = model.DEFAULT_SEED,
    force: bool = False,
) -> dict[str, Path]:
    """Both archives in ``store``: ``{"tiny_gpt": path, "tiny_gpt_async": path}``. ``batch_size`` and
    ``max_batch_delay_ms`` apply to the continuous-batching archive, ``max_new_tokens`` (the default
    budget) to both."""
    return {
        name: build_archive(
            store,
            name,
            batch_size=batch_size,
            max_batch_delay_ms=max_batch_delay_ms,
            max_new_tokens=max_new_tokens,
            step_delay_ms=step_delay_ms,
            seed=seed,
            force=force,
        )
        for name in (CB_MODEL, ASYNC_MODEL)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.tiny_gpt.archive", description=__doc__.split("\n")[0]
    )
    parser.add_argument("model_store", type=Path, help="model store folder to write the archives into")
    parser.add_argument("--force", action="store_true", help="rebuild archives that exist already")
    parser.add_argument(
        "--batch-size", type=int, default=8, help="continuous batching: requests per iteration"
    )
    parser.add_argument("--max-new-tokens", type=int, default=32, help="default generation budget")
    args = parser.parse_args(argv)
    for name in (CB_MODEL, ASYNC_MODEL):
        existed = (args.model_store / f"{name}.mar").exists()
        path = build_archive(
            args.model_store,
            name,
            batch_size=args.batch_size,
            max_new_tokens=args.max_new_tokens,
            force=args.force,
        )
        print(f"{'kept' if existed and not args.force else 'wrote'} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
