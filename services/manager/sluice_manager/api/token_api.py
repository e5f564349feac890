"""``/token?type=management|inference`` on the management REST port: renews one key. ``GET`` (the
form TorchServe's API docs show) and ``POST`` do the same, as in TorchServe; ``HEAD`` is not served,
since it would renew a key while looking like a read.

Authorized with the **API** key (``Authorization: Bearer <API key>``; the token middleware's
``management_scope`` asks for it on this route). The old key stops working at once on this manager
and within ``sluice_token_cache_s`` everywhere else. The key file is rewritten; unlike TorchServe
(empty body), the answer also carries the new key in the key file's shape, for managers whose key
file the caller cannot read::

    {"inference": {"key": "...", "expiration time": "2026-01-01T10:00:00.000000Z"}}

Only served while token authorization is on (otherwise the route does not exist: 404).
"""

import json

from aiohttp import web
from sluice.auth.key_material import EXPIRING, KeyKind, key_entry
from sluice.errors import ErrorCode, SluiceError

from sluice_manager.api.token_keys import KeyAuthority

TYPE_REQUIRED = "Parameter type must be management or inference."


class TokenRoutes:
    def __init__(self, authority: KeyAuthority) -> None:
        self._authority = authority

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/token", self.renew, allow_head=False), web.post("/token", self.renew)]

    async def renew(self, request: web.Request) -> web.Response:
        kind = request.query.get("type", "")
        if kind not in {k.value for k in EXPIRING}:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, TYPE_REQUIRED)
        key = await self._authority.rotate(KeyKind(kind))
        body = json.dumps({kind: key_entry(key)}, indent=2) + "\n"
        return web.Response(text=body, content_type="application/json")
