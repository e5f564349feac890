"""What a refused call gets, for both transports: one table, pure functions.

TorchServe 0.12 answers every refusal with gRPC PERMISSION_DENIED / REST 400 ``InvalidKeyException``
and one message (``token_error_codes=torchserve``, the default). ``token_error_codes=standard`` answers
UNAUTHENTICATED / 401 when no valid key was presented and PERMISSION_DENIED / 403 when a valid key of
another scope was (the caller is known, but not allowed here).
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from sluice.auth.settings import TokenErrorCodes
from sluice.auth.store import Verdict
from sluice.errors import ErrorCode, SluiceError

FAILED_MESSAGE = "Token Authorization failed. Token either incorrect, expired, or not provided correctly"
UNAVAILABLE_MESSAGE = "Token authorization is unavailable: the keys cannot be read. Try again later."
# TorchServe's pattern (TokenAuthorization.bearerTokenHeaderPattern), matched against the whole value.
_BEARER = re.compile(r"Bearer\s+(\S+)")


def bearer_token(values: Sequence[str]) -> str | None:
    """The token of the one ``authorization`` value ``Bearer <token>``; None when there is no such
    value, several values, or another form."""
    if len(values) != 1:
        return None
    match = _BEARER.fullmatch(values[0])
    return match.group(1) if match else None


@dataclass(frozen=True)
class Refusal:
    grpc_code: grpc.StatusCode
    http_status: int
    message: str

    def error(self) -> SluiceError:
        """The refusal as a domain error (REST maps it: ``InvalidKeyException``, ``http_status``)."""
        if self.grpc_code is grpc.StatusCode.UNAVAILABLE:
            return SluiceError(ErrorCode.UNAVAILABLE, self.message)
        return SluiceError(ErrorCode.PERMISSION_DENIED, self.message, http_status=self.http_status)


_TORCHSERVE = Refusal(grpc.StatusCode.PERMISSION_DENIED, 400, FAILED_MESSAGE)
_UNAUTHENTICATED = Refusal(grpc.StatusCode.UNAUTHENTICATED, 401, FAILED_MESSAGE)
_FORBIDDEN = Refusal(grpc.StatusCode.PERMISSION_DENIED, 403, FAILED_MESSAGE)
_UNAVAILABLE = Refusal(grpc.StatusCode.UNAVAILABLE, 503, UNAVAILABLE_MESSAGE)


def refusal(verdict: Verdict, codes: TokenErrorCodes) -> Refusal | None:
    """None when the call may proceed."""
    if verdict is Verdict.GRANTED:
        return None
    if verdict is Verdict.UNAVAILABLE:
        return _UNAVAILABLE
    if codes == "torchserve":
        return _TORCHSERVE
    return _FORBIDDEN if verdict is Verdict.WRONG_SCOPE else _UNAUTHENTICATED
