import pytest
from sluice_manager.memory_sizes import parse_bytes


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1048576", 1048576), ("512m", 512 * 1024**2), ("2g", 2 * 1024**3), ("1.5GiB", int(1.5 * 1024**3)),
     ("64K", 64 * 1024), (" 3 gb ", 3 * 1024**3), ("1t", 1024**4)],
)  # fmt: skip
def test_sizes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-1g", "2x", "g"])
def test_not_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="not a memory size"):
        parse_bytes(text)
