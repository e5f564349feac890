"""`sluice start`'s port check: a port with a listener is in use; one where only connections of a
stopped server linger in TIME-WAIT is not (the servers bind it with SO_REUSEADDR), so a start right
after a stop works while clients had connections open."""

import contextlib
import socket
import time
from collections.abc import Iterator

import psutil
import pytest
from sluice_cli.services import port_in_use

from tests.support.redis_server import free_port

LOOPBACK = "127.0.0.1"


def time_wait_on(port: int) -> None:
    """Leave a connection in TIME-WAIT on ``port``, as a server that closed its side first does (a
    `sluice stop` while a client had a channel open), and close the listener."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, port))
        listener.listen()
        with socket.create_connection((LOOPBACK, port), timeout=5) as client:
            served, _ = listener.accept()
            served.close()  # the server's end closes first: it is the one that waits
            assert client.recv(1) == b""
    deadline = time.monotonic() + 5
    while not lingering(port):
        assert time.monotonic() < deadline, "no TIME-WAIT connection appeared"
        time.sleep(0.01)


def lingering(port: int) -> bool:
    return any(
        conn.status == psutil.CONN_TIME_WAIT and conn.laddr and conn.laddr.port == port
        for conn in psutil.net_connections(kind="tcp")
    )


@contextlib.contextmanager
def listening(port: int) -> Iterator[None]:
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((LOOPBACK, port))
        server.listen()
        yield


def test_time_wait_connections_do_not_make_a_port_in_use() -> None:
    port = free_port()
    time_wait_on(port)
    assert not port_in_use(LOOPBACK, port)
    with listening(port):  # and a server can listen there again, as grpc and aiohttp do
        assert port_in_use(LOOPBACK, port)


@pytest.mark.parametrize("reuse_address", [True, False])
def test_a_listener_makes_a_port_in_use(reuse_address: bool) -> None:
    port = free_port()
    with socket.socket() as server:
        if reuse_address:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((LOOPBACK, port))
        server.listen()
        assert port_in_use(LOOPBACK, port)
        assert port_in_use("0.0.0.0", port)
    assert not port_in_use(LOOPBACK, port)


def test_a_listener_on_every_address_makes_a_loopback_port_in_use() -> None:
    port = free_port()
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", port))
        server.listen()
        assert port_in_use(LOOPBACK, port)
