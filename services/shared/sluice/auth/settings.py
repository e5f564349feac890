"""Token-authorization settings shared by the services that serve an API (gateway and manager).

TorchServe's keys (``disable_token_authorization``, ``token_expiration_min``) with its defaults: token
authorization is **on** unless switched off. Sluice's own keys choose the key file, the status codes a
refusal gets and how long a process trusts the key digests it read from Redis.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from sluice.settings.common import CommonSettings
from sluice.typed import Bounds, NonNegativeFloat

# "torchserve": TorchServe 0.12's codes (gRPC PERMISSION_DENIED, REST 400 InvalidKeyException) for
# every refusal. "standard": missing, malformed, unknown or expired token -> UNAUTHENTICATED / 401;
# a valid key of another scope -> PERMISSION_DENIED / 403.
TokenErrorCodes = Literal["torchserve", "standard"]


@dataclass(init=False, kw_only=True)
class AuthSettings(CommonSettings):
    TS_KEYS: ClassVar[dict[str, str]] = {
        **CommonSettings.TS_KEYS,
        "disable_token_authorization": "disable_token_authorization",
        "token_expiration_min": "token_expiration_min",
        "sluice_key_file": "key_file",
        "sluice_token_error_codes": "token_error_codes",
        "sluice_token_cache_s": "token_cache_s",
    }

    disable_token_authorization: bool = False
    # Lifetime of the inference and management keys (the API key, used only for /token, never expires).
    token_expiration_min: Annotated[float, Bounds(gt=0)] = 60.0
    # The operator's copy of the keys (written by the manager, mode 0600). Relative: to the working
    # directory, as TorchServe writes key_file.json to its working directory.
    key_file: Path = Path("key_file.json")
    token_error_codes: TokenErrorCodes = "torchserve"
    # How long a process reuses the key digests it read from Redis (a rotated key stops working
    # everywhere within this time; on the process that rotated it, at once). 0: read on every call.
    token_cache_s: NonNegativeFloat = 1.0

    @property
    def token_auth_enabled(self) -> bool:
        return not self.disable_token_authorization
