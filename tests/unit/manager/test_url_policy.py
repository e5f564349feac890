"""allowed_urls and the address rules, as pure checks (no sockets): what is refused before any
connection could be made."""

import ipaddress

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice_manager.api.model_api import MODEL_API_DISABLED, require_model_api
from sluice_manager.models.url_policy import UrlPolicy, address_allowed, check_url, is_url, shown


def refused(url: str, policy: UrlPolicy) -> SluiceError:
    with pytest.raises(SluiceError) as info:
        check_url(url, policy)
    return info.value


HTTPS_ONLY = UrlPolicy.parse(r"https://models\.example\.com/.*")


def test_default_policy_allows_no_url() -> None:
    error = refused("https://models.example.com/a.mar", UrlPolicy())
    assert error.code is ErrorCode.MODEL_NOT_FOUND
    assert error.message.startswith("Given URL https://models.example.com/a.mar does not match any allowed")


def test_a_listed_https_url_passes() -> None:
    checked = check_url("https://models.example.com/a.mar", HTTPS_ONLY)
    assert (checked.scheme, checked.host) == ("https", "models.example.com")


@pytest.mark.parametrize(
    "url",
    [
        "https://models.example.com.evil.org/a.mar",  # anchored: a prefix match is not enough
        "https://evil.org/?x=https://models.example.com/a.mar",
        "http://models.example.com/a.mar",  # http needs a pattern that starts with http
        "file:///etc/passwd",
        "ftp://models.example.com/a.mar",
    ],
)
def test_unlisted_urls_are_refused(url: str) -> None:
    assert refused(url, HTTPS_ONLY).code is ErrorCode.MODEL_NOT_FOUND


def test_a_catch_all_pattern_still_allows_https_only() -> None:
    everything = UrlPolicy.parse(".*")
    check_url("https://example.com/a.mar", everything)
    assert "http URLs need a pattern" in refused("http://example.com/a.mar", everything).message
    assert "file URLs need a pattern" in refused("file:///srv/a.mar", everything).message


def test_http_and_file_need_their_scheme_spelled_out() -> None:
    policy = UrlPolicy.parse(r"http(s)?://example\.com/.*,file:///srv/models/.*")
    check_url("http://example.com/a.mar", policy)
    check_url("https://example.com/a.mar", policy)
    check_url("file:///srv/models/a.mar", policy)
    assert refused("file:///etc/passwd", policy).code is ErrorCode.MODEL_NOT_FOUND


@pytest.mark.parametrize(
    "url",
    [
        "https://models.example.com/../a.mar",
        "https://models.example.com/x/%2e%2e/a.mar",
        "https://models.example.com/x/%252e%252e/a.mar",
        "https://models.example.com/..",
    ],
)
def test_dot_dot_is_refused(url: str) -> None:
    error = refused(url, UrlPolicy.parse("https://models.example.com/.*"))
    assert error.message.startswith("Relative path is not allowed in url")


@pytest.mark.parametrize(
    "url",
    [
        "https://user:pw@models.example.com/a.mar",
        "https://user@models.example.com/a.mar",
        "https://@models.example.com/a.mar",
    ],
)
def test_credentials_are_refused_and_never_echoed(url: str) -> None:
    error = refused(url, UrlPolicy.parse(".*"))
    assert "credentials" in error.message
    assert "pw" not in error.message
    assert "user" not in error.message


@pytest.mark.parametrize(
    "url",
    ["https://models.example.com\\@evil.org/a.mar", "https://models.example.com/a b.mar", "https://x/\x00"],
)
def test_malformed_urls_are_refused(url: str) -> None:
    assert refused(url, UrlPolicy.parse(".*")).code in (ErrorCode.INVALID_ARGUMENT, ErrorCode.MODEL_NOT_FOUND)


def test_non_default_ports_must_be_spelled_out() -> None:
    loose = UrlPolicy.parse(r"https://models\.example\.com.*")
    assert "port 8443" in refused("https://models.example.com:8443/a.mar", loose).message
    check_url("https://models.example.com:443/a.mar", loose)
    check_url(
        "https://models.example.com:8443/a.mar", UrlPolicy.parse(r"https://models\.example\.com:8443/.*")
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1/a.mar",
        "http://10.1.2.3/a.mar",
        "http://192.168.0.1/a.mar",
        "http://172.16.0.1/a.mar",
        "http://[::1]/a.mar",
        "http://[fd00::1]/a.mar",
        "http://[fe80::1]/a.mar",
        "http://[::ffff:127.0.0.1]/a.mar",
        "http://0.0.0.0/a.mar",
        "http://100.64.0.1/a.mar",
        "http://224.0.0.1/a.mar",
    ],
)
def test_non_public_ip_literals_are_refused(url: str) -> None:
    error = refused(url, UrlPolicy.parse("http://.*"))
    assert "not public" in error.message


def test_allow_listed_networks_open_private_addresses() -> None:
    policy = UrlPolicy.parse(r"http://10\.1\.2\.3/.*", "10.0.0.0/8")
    check_url("http://10.1.2.3/a.mar", policy)


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("8.8.8.8", True),
        ("2001:4860:4860::8888", True),
        ("127.0.0.1", False),
        ("169.254.169.254", False),
        ("2002:7f00:1::1", False),  # 6to4 around 127.0.0.1
        ("64:ff9b::a9fe:a9fe", False),  # NAT64 around 169.254.169.254
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", False),  # Teredo client 127.0.0.1
    ],
)
def test_address_rules(address: str, allowed: bool) -> None:
    assert address_allowed(ipaddress.ip_address(address), UrlPolicy()) is allowed


def test_policy_parsing_rejects_bad_patterns_and_networks() -> None:
    with pytest.raises(ValueError, match="allowed_urls"):
        UrlPolicy.parse("https://(")
    with pytest.raises(ValueError, match="networks"):
        UrlPolicy.parse("", "10.0.0.0/33")
    assert UrlPolicy.parse(" , ").patterns == ()


def test_is_url_and_shown() -> None:
    assert is_url("https://x/a.mar")
    assert is_url("file:///a.mar")
    assert not is_url("a.mar")
    assert not is_url("dir/a.mar")
    assert shown("https://u:p@host:8443/a.mar?X-Amz-Signature=secret") == "https://host:8443/a.mar"


def test_model_api_switch() -> None:
    require_model_api(True)
    with pytest.raises(SluiceError) as info:
        require_model_api(False)
    assert (info.value.code, info.value.message) == (ErrorCode.MODEL_API_DISABLED, MODEL_API_DISABLED)
