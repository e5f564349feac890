"""Redis commands in RESP, packed by hiredis, with large arguments kept as buffers of their own."""

from typing import Any, cast

import hiredis

Arg = bytes | str | int | float

# An argument this large is written as its own buffer, not copied into the command's (a request
# payload of megabytes would otherwise be copied twice more: into the packed command, then into the
# joined write).
LARGE_ARG_BYTES = 64 * 1024


def pack(command: tuple[Arg, ...]) -> bytes:
    """One command in RESP. (hiredis's stub types the tuple as one element long.)"""
    packed: bytes = hiredis.pack_command(cast(Any, command))
    return packed


def is_large(arg: Arg) -> bool:
    return isinstance(arg, bytes) and len(arg) >= LARGE_ARG_BYTES


def pack_parts(command: tuple[Arg, ...]) -> list[bytes]:
    """``command`` in RESP as buffers to write in order: its large bytes arguments as they are, the
    RESP around them packed by hiredis (each small argument packed alone, its array header dropped)."""
    parts: list[bytes] = []
    head = [b"*%d\r\n" % len(command)]
    for arg in command:
        if is_large(arg):
            assert isinstance(arg, bytes)
            head.append(b"$%d\r\n" % len(arg))
            parts += [b"".join(head), arg]
            head = [b"\r\n"]
        else:
            # hiredis packs ("x",) as *1\r\n$1\r\nx\r\n: the bulk string is what follows "*1\r\n".
            head.append(pack((arg,))[4:])
    parts.append(b"".join(head))
    return parts


def coalesced(buffers: list[bytes]) -> list[bytes]:
    """``buffers`` with each run of small ones joined: one write buffer per run, large ones as they are."""
    out: list[bytes] = []
    run: list[bytes] = []
    for buffer in buffers:
        if len(buffer) >= LARGE_ARG_BYTES:
            if run:
                out.append(b"".join(run))
                run = []
            out.append(buffer)
        else:
            run.append(buffer)
    if run:
        out.append(b"".join(run))
    return out
