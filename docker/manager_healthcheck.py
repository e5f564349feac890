"""Manager container health check (until the management gRPC API lands, then use healthcheck.py on 7071):
exit 0 only if Redis answers and the reconcile lease is held, by this manager or, for a standby, by
another one. The holder renews the lease on every reconcile pass, so a hung manager loses it within
``lease_ttl_s`` and turns unhealthy.
"""

import json
import socket
import sys

import redis
from sluice.redis import keys
from sluice.redis.client import connect_sync
from sluice_manager.settings import ManagerSettings

TIMEOUT_S = 3.0


def main() -> int:
    settings = ManagerSettings()
    # Through the Sentinels when the stack runs on them (docker-compose.ha.yml).
    client = connect_sync(settings.redis_url, timeout_s=TIMEOUT_S)
    try:
        raw = client.get(keys.MANAGER_LEASE)
    except redis.RedisError as exc:
        print(f"redis unreachable: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if raw is None:
        print("no manager holds the reconcile lease", file=sys.stderr)
        return 1
    holder = json.loads(raw)
    role = "reconciling" if holder.get("host") == socket.gethostname() else f"standby, lease held by {holder}"
    print(f"manager {role}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
