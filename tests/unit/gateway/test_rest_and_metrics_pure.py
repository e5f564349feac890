"""Pure pieces of the REST transport and the metrics: addresses, the exposition format, tensor packing."""

import struct

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.transport.http_listener import ListenAddress, parse_address
from sluice.transport.status_map import rest_error_type, rest_status
from sluice_gateway.kserve.rest_tensors import json_data, pack
from sluice_gateway.metrics.exposition import MetricFamily, Sample, histogram_samples, render, select


def test_addresses() -> None:
    assert parse_address("http://127.0.0.1:8080") == ListenAddress("127.0.0.1", 8080)
    assert parse_address("http://0.0.0.0:0") == ListenAddress("0.0.0.0", 0)
    assert parse_address("http://[::1]:9") == ListenAddress("::1", 9)
    assert parse_address("unix:/tmp/s.sock") == ListenAddress(unix_path="/tmp/s.sock")
    assert parse_address("https://x:1") == ListenAddress("x", 1, tls=True)
    assert parse_address("https://x") == ListenAddress("x", 443, tls=True)
    for bad in ("ftp://x:1", "unix:", "127.0.0.1:8080", "http://:80"):
        with pytest.raises(ValueError):  # noqa: PT011
            parse_address(bad)


def test_exposition_has_torchserve_trailing_commas_and_escapes() -> None:
    family = MetricFamily("m_total", "counter", "Help.", [Sample("m_total", [("a", 'x"y\\z\n')], 3)])
    assert (
        render([family]) == '# HELP m_total Help.\n# TYPE m_total counter\nm_total{a="x\\"y\\\\z\\n",} 3.0\n'
    )
    assert render([MetricFamily("g", "gauge", "H.", [Sample("g", [], 0.5)])]).endswith("g 0.5\n")


def test_histogram_is_cumulative() -> None:
    samples = histogram_samples("h", [("m", "x")], {1: 2, 3: 1, 300: 1}, (1, 2, 4))
    lines = render([MetricFamily("h", "histogram", "H.", samples)]).splitlines()[2:]
    assert lines == [
        'h_bucket{m="x",le="1.0",} 2.0',
        'h_bucket{m="x",le="2.0",} 2.0',
        'h_bucket{m="x",le="4.0",} 3.0',
        'h_bucket{m="x",le="+Inf",} 4.0',
        'h_count{m="x",} 4.0',
        'h_sum{m="x",} 305.0',
    ]


def test_select_by_family_or_sample_name() -> None:
    a = MetricFamily("a", "counter", "A.")
    h = MetricFamily("h", "histogram", "H.", histogram_samples("h", [], {1: 1}, (1,)))
    assert select([a, h], []) == [a, h]
    assert select([a, h], ["h_bucket"]) == [h]
    assert select([a, h], ["nothing"]) == []


def test_rest_status_remaps_413_from_jobs_only() -> None:
    assert rest_status(SluiceError(ErrorCode.HANDLER_FAILED, "m", 413)) == 507
    assert rest_status(SluiceError(ErrorCode.MESSAGE_TOO_LARGE, "m")) == 413
    assert rest_error_type(SluiceError(ErrorCode.MODEL_NOT_FOUND, "m")) == "ModelNotFoundException"


@pytest.mark.parametrize(
    ("datatype", "data", "expected"),
    [
        ("FP32", [[1.5, -2.0]], [1.5, -2.0]),
        ("INT64", [1, -(2**62)], [1, -(2**62)]),
        ("UINT8", [0, 255], [0, 255]),
        ("BOOL", [True, False], [True, False]),
        ("FP16", [0.5, 2.0], [0.5, 2.0]),
        ("BF16", [1.0, -2.5], [1.0, -2.5]),
        ("BYTES", ["a", "", "héllo"], ["a", "", "héllo"]),
    ],
)
def test_pack_unpack_round_trip(datatype: str, data: list[object], expected: list[object]) -> None:
    assert json_data(datatype, pack(datatype, data, "x")) == expected


def test_pack_layout_and_errors() -> None:
    assert pack("INT32", [1, 2], "x") == struct.pack("<2i", 1, 2)
    assert pack("BYTES", ["ab"], "x") == b"\x02\x00\x00\x00ab"
    with pytest.raises(SluiceError) as caught:
        pack("INT8", [1000], "x")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(SluiceError):
        pack("FP32", ["nope"], "x")
