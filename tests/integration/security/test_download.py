"""Downloading model archives (allowed_urls): real HTTP servers on 127.0.0.1 that count every request,
so "refused" means nothing was fetched, not merely that an error came back."""

import asyncio
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from sluice.errors import ErrorCode, SluiceError
from sluice_manager.models.archives import ArchiveKind
from sluice_manager.models.download import download_archive, downloaded
from sluice_manager.models.url_policy import UrlPolicy
from sluice_manager.settings import ManagerSettings

ARCHIVE = b"PK\x05\x06" + b"\x00" * 18  # an empty zip
LOOPBACK = "127.0.0.1/32"


class CountingServer:
    """An HTTP server on 127.0.0.1 that records every request path."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self._handle)
        self.routes: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {}
        self.port = 0
        self._runner = web.AppRunner(self.app, access_log=None)

    async def start(self) -> "CountingServer":
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        await self._runner.cleanup()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.hits.append(request.path)
        handler = self.routes.get(request.path)
        if handler is None:
            return web.Response(body=ARCHIVE)
        return await handler(request)


@pytest.fixture
async def server() -> AsyncIterator[CountingServer]:
    started = await CountingServer().start()
    yield started
    await started.stop()


@pytest.fixture
async def other_server() -> AsyncIterator[CountingServer]:
    started = await CountingServer().start()
    yield started
    await started.stop()


def policy_for(server: CountingServer, networks: str = LOOPBACK, **limits: float) -> UrlPolicy:
    return UrlPolicy.parse(rf"http://127\.0\.0\.1:{server.port}/models/.*", networks, **limits)


async def refused(url: str, policy: UrlPolicy, staging: Path) -> SluiceError:
    with pytest.raises(SluiceError) as info:
        async with downloaded(url, policy, staging):
            pytest.fail("the caller must not get a path")
    assert leftovers(staging) == []  # nothing left behind
    return info.value


def leftovers(staging: Path) -> list[Path]:
    return list(staging.iterdir()) if staging.exists() else []


async def test_an_allowed_url_is_downloaded_privately_and_cleaned_up(
    server: CountingServer, tmp_path: Path
) -> None:
    staging = tmp_path / "downloads"
    async with downloaded(server.url("/models/echo.mar"), policy_for(server), staging) as archive:
        assert archive.path.read_bytes() == ARCHIVE
        assert archive.kind is ArchiveKind.ZIP
        assert archive.size_bytes == len(ARCHIVE)
        assert stat.S_IMODE(archive.path.stat().st_mode) == 0o600
        assert stat.S_IMODE(archive.path.parent.stat().st_mode) == 0o700
        assert archive.path.parent.parent == staging
    assert not archive.path.exists()
    assert list(staging.iterdir()) == []
    assert server.hits == ["/models/echo.mar"]


async def test_tar_gz_names_keep_their_kind(server: CountingServer, tmp_path: Path) -> None:
    async with downloaded(server.url("/models/m.tar.gz"), policy_for(server), tmp_path) as archive:
        assert archive.kind is ArchiveKind.TAR_GZ
        assert archive.path.name == "m.tar.gz"


@pytest.mark.parametrize(
    "make_url",
    [
        lambda s: s.url("/other/echo.mar"),  # not listed
        lambda s: f"http://user:pw@127.0.0.1:{s.port}/models/echo.mar",  # userinfo
        lambda s: s.url("/models/../models/echo.mar"),  # ..
        lambda s: s.url("/models/%2e%2e/echo.mar"),
        lambda s: s.url("/models/echo.mar", host="localhost"),  # a name not in the pattern
    ],
)
async def test_refused_urls_fetch_nothing(
    server: CountingServer, tmp_path: Path, make_url: Callable[[CountingServer], str]
) -> None:
    await refused(make_url(server), policy_for(server), tmp_path)
    assert server.hits == []


async def test_the_default_policy_fetches_nothing(server: CountingServer, tmp_path: Path) -> None:
    error = await refused(server.url("/models/echo.mar"), UrlPolicy(), tmp_path)
    assert error.code is ErrorCode.MODEL_NOT_FOUND
    assert server.hits == []


async def test_loopback_needs_an_allow_listed_network(server: CountingServer, tmp_path: Path) -> None:
    error = await refused(server.url("/models/echo.mar"), policy_for(server, networks=""), tmp_path)
    assert "not public" in error.message
    assert server.hits == []


async def test_a_name_resolving_to_loopback_is_refused_at_connect_time(
    server: CountingServer, tmp_path: Path
) -> None:
    policy = UrlPolicy.parse(rf"http://localhost:{server.port}/models/.*")
    error = await refused(server.url("/models/echo.mar", host="localhost"), policy, tmp_path)
    assert "resolves to an address that is not public" in error.message
    assert server.hits == []


async def test_cloud_metadata_address_is_refused(tmp_path: Path) -> None:
    policy = UrlPolicy.parse(r"http://169\.254\.169\.254/.*")
    error = await refused("http://169.254.169.254/latest/meta-data/", policy, tmp_path)
    assert "not public" in error.message


async def test_file_urls_are_refused_unless_listed(tmp_path: Path) -> None:
    archive = tmp_path / "store" / "echo.mar"
    archive.parent.mkdir()
    archive.write_bytes(ARCHIVE)
    await refused(f"file://{archive}", UrlPolicy.parse(".*"), tmp_path / "dl")
    allowed = UrlPolicy.parse(f"file://{tmp_path}/store/.*")
    async with downloaded(f"file://{archive}", allowed, tmp_path / "dl") as got:
        assert got.path.read_bytes() == ARCHIVE


async def test_file_url_symlinks_must_stay_inside_the_pattern(tmp_path: Path) -> None:
    secret = tmp_path / "secret.mar"
    secret.write_bytes(b"secret")
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "link.mar").symlink_to(secret)
    policy = UrlPolicy.parse(f"file://{tmp_path}/store/.*")
    await refused(f"file://{tmp_path}/store/link.mar", policy, tmp_path / "dl")


async def test_a_redirect_to_a_disallowed_target_fetches_nothing_there(
    server: CountingServer, other_server: CountingServer, tmp_path: Path
) -> None:
    async def redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(other_server.url("/models/echo.mar", host="localhost"))

    server.routes["/models/echo.mar"] = redirect
    error = await refused(server.url("/models/echo.mar"), policy_for(server), tmp_path)
    assert error.code is ErrorCode.MODEL_NOT_FOUND
    assert server.hits == ["/models/echo.mar"]
    assert other_server.hits == []


async def test_a_redirect_to_an_allowed_target_is_followed(server: CountingServer, tmp_path: Path) -> None:
    async def redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/models/real.mar")

    server.routes["/models/echo.mar"] = redirect
    async with downloaded(server.url("/models/echo.mar"), policy_for(server), tmp_path) as archive:
        assert archive.path.read_bytes() == ARCHIVE
    assert server.hits == ["/models/echo.mar", "/models/real.mar"]


async def test_redirect_loops_stop(server: CountingServer, tmp_path: Path) -> None:
    async def loop(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/models/echo.mar")

    server.routes["/models/echo.mar"] = loop
    error = await refused(server.url("/models/echo.mar"), policy_for(server, max_redirects=3), tmp_path)
    assert "redirects" in error.message
    assert len(server.hits) == 4


async def test_an_oversize_body_is_refused_by_its_length(server: CountingServer, tmp_path: Path) -> None:
    async def big(request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"x" * 5000)

    server.routes["/models/big.mar"] = big
    error = await refused(server.url("/models/big.mar"), policy_for(server, max_bytes=1000), tmp_path)
    assert "limit" in error.message


async def test_an_oversize_chunked_body_is_cut_off(server: CountingServer, tmp_path: Path) -> None:
    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(100):
            await response.write(b"x" * 1000)
        return response

    server.routes["/models/big.mar"] = endless
    error = await refused(server.url("/models/big.mar"), policy_for(server, max_bytes=10_000), tmp_path)
    assert "limit" in error.message


async def test_a_slow_body_past_the_time_cap_is_refused(server: CountingServer, tmp_path: Path) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(50):
            await response.write(b"x")
            await asyncio.sleep(0.1)
        return response

    server.routes["/models/slow.mar"] = slow
    policy = policy_for(server, timeout_s=0.5)
    error = await refused(server.url("/models/slow.mar"), policy, tmp_path)
    assert "took longer than 0.5 s" in error.message


async def test_an_http_error_is_a_download_failure(server: CountingServer, tmp_path: Path) -> None:
    async def missing(request: web.Request) -> web.StreamResponse:
        raise web.HTTPNotFound()

    server.routes["/models/none.mar"] = missing
    error = await refused(server.url("/models/none.mar"), policy_for(server), tmp_path)
    assert error.code is ErrorCode.INVALID_ARGUMENT
    assert error.message.startswith("Failed to download model from: ")


async def test_the_registration_seam_downloads_into_a_private_folder(
    server: CountingServer, tmp_path: Path
) -> None:
    settings = ManagerSettings(
        allowed_urls=rf"http://127\.0\.0\.1:{server.port}/models/.*", allowed_url_networks=LOOPBACK
    )
    path = await download_archive(server.url("/models/echo.mar"), tmp_path / "work", settings)
    assert path.read_bytes() == ARCHIVE
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.parent.parent == tmp_path / "work"
    with pytest.raises(SluiceError):
        await download_archive(server.url("/other/x.mar"), tmp_path / "work2", settings)
    assert leftovers(tmp_path / "work2") == []
    assert server.hits == ["/models/echo.mar"]
