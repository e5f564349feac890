"""Which Redis failures shared code catches: Sluice's own, and redis-py's only where it is loaded."""

import subprocess
import sys

import redis.exceptions
from sluice.redis.errors import RedisError, failures


def test_redis_py_failures_count_once_redis_py_is_loaded() -> None:
    assert failures() == (RedisError, redis.exceptions.RedisError)


def test_without_redis_py_only_sluice_failures_count() -> None:
    script = "import sys; from sluice.redis.errors import failures; print(failures(), 'redis' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "(<class 'sluice.redis.errors.RedisError'>,) False"
