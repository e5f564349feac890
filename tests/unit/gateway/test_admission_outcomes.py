"""The gateway admits by the shared admission rule (sluice.admission): every answer of the rule's
scripts, and of the sequence script, is one of the data plane's admissions."""

import pytest
from sluice.admission import Outcome
from sluice_gateway.broker.redis_admission import OUTCOMES, admission_of
from sluice_gateway.broker.seam import Admission


@pytest.mark.parametrize(
    ("answer", "admission"),
    [
        (b"1700000000000-0", Admission.ADMITTED),  # the new entry's id
        (b"ADMITTED", Admission.ADMITTED),
        (b"COLD", Admission.ADMITTED_COLD),
        (b"NOT_FOUND", Admission.VERSION_GONE),
        (b"NO_WORKER", Admission.NO_WORKER),
        (b"QUEUE_FULL", Admission.QUEUE_FULL),
        (b"CLOSED", Admission.SEQUENCE_CLOSED),
        (b"START_REQUIRED", Admission.SEQUENCE_START_REQUIRED),
        (b"LIMIT", Admission.SEQUENCE_LIMIT),
    ],
)
def test_script_answers_are_admissions(answer: bytes, admission: Admission) -> None:
    assert admission_of(answer) is admission


def test_every_outcome_of_the_rule_is_an_admission() -> None:
    assert {outcome.value.encode() for outcome in Outcome} <= OUTCOMES.keys()
