"""A job as the worker holds it: the stream entry it came from and which delivery this is."""

from dataclasses import dataclass

from sluice.envelope import Job


@dataclass(frozen=True)
class Delivery:
    entry_id: bytes
    job: Job
    # Delivery count of the entry (1 = first delivery); replies carry it as Reply.attempt.
    attempt: int = 1

    @property
    def job_id(self) -> str:
        return self.job.job_id
