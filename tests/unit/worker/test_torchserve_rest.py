"""TorchServe REST request decoding in the worker, case by case (TorchServe's frontend + worker rules)."""

import pytest
from sluice.envelope import Job
from sluice.errors import SluiceError
from sluice_worker.protocols.torchserve_rest import rest_parameters

BOUNDARY = "XyZ"


def job(body: bytes, content_type: str | None = None, header_name: str = "Content-Type") -> Job:
    out = Job(request=body)
    if content_type is not None:
        out.headers[header_name] = content_type
    return out


def multipart(*parts: tuple[str, bytes]) -> bytes:
    return (
        b"".join(
            b"--" + BOUNDARY.encode() + b"\r\n" + head.encode() + b"\r\n\r\n" + data + b"\r\n"
            for head, data in parts
        )
        + b"--"
        + BOUNDARY.encode()
        + b"--\r\n"
    )


@pytest.mark.parametrize(
    ("content_type", "body", "expected_type", "value"),
    [
        ("application/json", b'{"a": [1, 2]}', "application/json", {"a": [1, 2]}),
        ("application/json; charset=utf-8", b"[1]", "application/json", [1]),
        ("application/json", b"{broken", "application/json", bytearray(b"{broken")),
        ("Application/JSON", b"[1]", "Application/JSON", bytearray(b"[1]")),  # TorchServe compares exactly
        ("text/plain", "héllo".encode(), "text/plain", "héllo"),
        ("text/csv; charset=utf-8", b"a,b", "text/csv", "a,b"),
        ("text/plain", b"\xff", "text/plain", bytearray(b"\xff")),
        ("application/octet-stream", b"\x00\x01", "application/octet-stream", bytearray(b"\x00\x01")),
        (None, b"raw", "", bytearray(b"raw")),
    ],
)
def test_body_decoding(content_type: str | None, body: bytes, expected_type: str, value: object) -> None:
    assert rest_parameters(job(body, content_type)) == [
        {"name": "body", "contentType": expected_type, "value": value}
    ]


def test_header_name_is_case_insensitive_and_decoding_can_be_off() -> None:
    assert rest_parameters(job(b"[1]", "application/json", "content-type"))[0]["value"] == [1]
    assert rest_parameters(job(b"[1]", "application/json"), decode=False)[0]["value"] == bytearray(b"[1]")


def test_form_fields() -> None:
    params = rest_parameters(job(b"a=1&b=x+y&c=%FF&a=2&e", "application/x-www-form-urlencoded"))
    assert [(p["name"], p["contentType"], p["value"]) for p in params] == [
        ("a", "", bytearray(b"1")),
        ("b", "", bytearray(b"x y")),
        ("c", "", bytearray(b"\xff")),
        ("a", "", bytearray(b"2")),
        ("e", "", bytearray(b"")),
    ]


def test_multipart_parts() -> None:
    body = multipart(
        (
            'Content-Disposition: form-data; name="data"; filename="a.bin"\r\n'
            "Content-Type: application/octet-stream",
            b"\x00\r\n--XyQ",
        ),
        ('Content-Disposition: form-data; name="kind"', b"json"),
        (
            'Content-Disposition: form-data; name="doc"; filename="d.json"\r\nContent-Type: application/json',
            b'{"k": 1}',
        ),
        (
            'Content-Disposition: form-data; name="note"; filename="n.txt"\r\n'
            "Content-Type: text/plain; charset=utf-8",
            b"hi",
        ),
        ('Content-Disposition: form-data; name="blob"; filename="b"', b"?"),
    )
    params = rest_parameters(job(body, f'multipart/form-data; boundary="{BOUNDARY}"'))
    assert [(p["name"], p["contentType"], p["value"]) for p in params] == [
        ("data", "application/octet-stream", bytearray(b"\x00\r\n--XyQ")),
        ("kind", "", bytearray(b"json")),
        ("doc", "application/json", {"k": 1}),
        ("note", "text/plain", "hi"),
        ("blob", "application/octet-stream", bytearray(b"?")),
    ]


@pytest.mark.parametrize("content_type", ["multipart/form-data", f"multipart/form-data; boundary={BOUNDARY}"])
def test_malformed_multipart_is_a_client_error(content_type: str) -> None:
    with pytest.raises(SluiceError) as caught:
        rest_parameters(job(b"--XyZ\r\nno end", content_type))
    assert caught.value.http_status == 400
