"""The sequence a TorchServe REST request names, read from its headers (names as configured)."""

import pytest
from sluice_gateway.broker.seam import SequenceStep
from sluice_gateway.sequences import SequenceHeaders
from sluice_gateway.torchserve.rest_codec import sequence_step

NAMES = SequenceHeaders()


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"ts_request_sequence_id": ""}, None),
        ({"ts_request_sequence_start": "true"}, None),
        ({"ts_request_sequence_id": "s"}, SequenceStep("s", start=None, end=False)),
        (
            {"ts_request_sequence_id": "s", "ts_request_sequence_start": "true"},
            SequenceStep("s", start=True, end=False),
        ),
        (
            {
                "ts_request_sequence_id": "s",
                "ts_request_sequence_start": "false",
                "ts_request_sequence_end": "True",
            },
            SequenceStep("s", start=None, end=True),
        ),
        # HTTP header names match whatever their case; the last one sent wins.
        (
            {"TS_Request_Sequence_Id": "a", "ts_request_sequence_id": "b"},
            SequenceStep("b", start=None, end=False),
        ),
    ],
)
def test_the_sequence_headers(headers: dict[str, str], expected: SequenceStep | None) -> None:
    assert sequence_step(headers, NAMES) == expected


def test_the_configured_names_are_read() -> None:
    names = SequenceHeaders("x-seq", "x-start", "x-end")
    headers = {"x-seq": "s", "x-start": "true", "ts_request_sequence_end": "true"}
    assert sequence_step(headers, names) == SequenceStep("s", start=True, end=False)
    assert sequence_step({"ts_request_sequence_id": "s"}, names) is None
