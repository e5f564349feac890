"""The bench's port picker: distinct, bindable, and outside the ephemeral and the tests' ranges."""

import random
import socket

import pytest

from bench.servers.common import LOOPBACK, PORT_RANGE, Ports


def test_ports_are_distinct_bindable_and_in_range() -> None:
    ports = Ports.free(random.Random(7))
    numbers = [ports.grpc, ports.grpc_management, ports.rest, ports.management, ports.metrics, ports.redis]
    assert len(set(numbers)) == 6
    assert all(PORT_RANGE[0] <= port < PORT_RANGE[1] for port in numbers)
    for port in numbers:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, port))


def test_a_port_in_use_is_skipped() -> None:
    taken = Ports.free(random.Random(11)).grpc
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind((LOOPBACK, taken))
        holder.listen()
        # The same seed draws ``taken`` first; it must be passed over.
        ports = Ports.free(random.Random(11))
    assert taken not in {ports.grpc, ports.grpc_management, ports.rest, ports.management, ports.metrics}


class _OneNumber(random.Random):
    def randrange(self, *args: int, **kwargs: object) -> int:  # type: ignore[override]
        return PORT_RANGE[0]


def test_no_six_ports_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="no six free loopback ports"):
        Ports.free(_OneNumber())
