"""The GPUs a host shows: TorchServe's ``number_of_gpu`` defaults to all of them (it asks nvidia-smi),
and a setting caps the count. The manager does not import torch; nvidia-smi answers in a few ms."""

import shutil
import subprocess

from sluice.log import get_logger

log = get_logger(__name__)

_QUERY = ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"]
_TIMEOUT_S = 10.0


def parse_indexes(output: str) -> tuple[int, ...]:
    """GPU indexes from nvidia-smi's ``--query-gpu=index`` output (one per line)."""
    return tuple(int(line) for line in (raw.strip() for raw in output.splitlines()) if line.isdigit())


def visible_gpu_ids() -> tuple[int, ...]:
    """Indexes of the GPUs nvidia-smi lists on this host; () without nvidia-smi or when it fails."""
    if shutil.which(_QUERY[0]) is None:
        return ()
    try:
        done = subprocess.run(_QUERY, capture_output=True, text=True, timeout=_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("nvidia-smi failed; no GPUs used", error=str(exc))
        return ()
    return parse_indexes(done.stdout)


def gpu_ids(number_of_gpu: int | None, visible: tuple[int, ...]) -> tuple[int, ...]:
    """The GPUs to hand out: all ``visible`` ones, or the first ``number_of_gpu`` of them (TorchServe
    caps the setting at what it detects)."""
    return visible if number_of_gpu is None else visible[:number_of_gpu]
