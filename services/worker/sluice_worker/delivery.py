"""A job as the worker holds it: the broker's receipt for it and which delivery this is."""

from dataclasses import dataclass

from sluice.envelope import Job


@dataclass(frozen=True)
class SequenceTurn:
    """A stateful model's job: its sequence, and what the worker must do before running it."""

    sequence_id: str
    # The state the handler saved for the sequence, to load first: the sequence moved here from a
    # worker that died or stopped (handlers that opt in, see sluice_worker.sequence_state).
    restore: bytes | None = None
    # The sequence moved here without a saved state after its handler had run: the job fails with
    # "sequence state lost: worker died" rather than run on empty state.
    lost: bool = False


@dataclass(frozen=True)
class Delivery:
    # What the broker acknowledges the job by (a stream entry id on Redis); opaque to the loop.
    receipt: bytes
    job: Job
    # Delivery count of the entry (1 = first delivery); replies carry it as Reply.attempt.
    attempt: int = 1
    sequence: SequenceTurn | None = None
    # A large job's request, a view into the stream entry (its Job's request is then empty: see
    # sluice.envelope.decode_job_split); None: the request is the Job's.
    request: bytes | memoryview | None = None

    @property
    def payload(self) -> bytes | memoryview:
        """The client's request, as the job's wire protocol encodes it."""
        return self.job.request if self.request is None else self.request

    @property
    def job_id(self) -> str:
        return self.job.job_id
