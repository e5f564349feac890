"""A command with a large argument is packed as buffers whose concatenation is hiredis's packing."""

import pytest
from sluice.redis.resp import LARGE_ARG_BYTES, pack, pack_parts

LARGE = b"\x00\xff" * LARGE_ARG_BYTES


@pytest.mark.parametrize(
    "command",
    [
        ("XADD", "stream", "*", "m", LARGE),
        ("EVAL", "return 1", 2, "k1", "k2", LARGE, 1.5, LARGE, "after"),
        ("SET", LARGE, "ünï"),
    ],
)
def test_the_parts_are_the_packed_command(command: tuple[bytes | str | int | float, ...]) -> None:
    parts = pack_parts(command)
    assert b"".join(parts) == pack(command)
    # Each large argument is one of the buffers, not a copy inside another.
    assert sum(1 for part in parts if part is LARGE) == command.count(LARGE)
