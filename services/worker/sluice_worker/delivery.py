"""A job as the worker holds it: the broker's receipt for it and which delivery this is."""

from dataclasses import dataclass

from sluice.envelope import Job


@dataclass(frozen=True)
class Delivery:
    # What the broker acknowledges the job by (a stream entry id on Redis); opaque to the loop.
    receipt: bytes
    job: Job
    # Delivery count of the entry (1 = first delivery); replies carry it as Reply.attempt.
    attempt: int = 1

    @property
    def job_id(self) -> str:
        return self.job.job_id
