"""The allocator's thresholds are raised on glibc, unless the operator set them."""

import pytest
from sluice import large_buffers


def test_glibcs_thresholds_are_raised() -> None:
    assert large_buffers.keep_large_buffers()


def test_the_operators_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert not large_buffers.keep_large_buffers()
