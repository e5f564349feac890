"""How the management rpcs report errors (:mod:`sluice.transport.grpc_errors`): details in TorchServe's
``"<message>\\n<java exception class>"`` form, and a Redis that does not answer as UNAVAILABLE."""

from redis.exceptions import RedisError
from sluice.errors import Unavailable
from sluice.transport.grpc_errors import StatusMapping

REDIS_UNAVAILABLE = "Service unavailable: the registry is unreachable."

MANAGEMENT_STATUS = StatusMapping(unavailable=Unavailable((RedisError,), REDIS_UNAVAILABLE))
