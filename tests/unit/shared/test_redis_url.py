"""Redis URLs as logs show them: the password masked, the rest kept."""

import pytest
from sluice.redis.url import redacted


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6399/0", "redis://127.0.0.1:6399/0"),
        ("redis://:s3cret@127.0.0.1:6399/0", "redis://:***@127.0.0.1:6399/0"),
        ("rediss://user:s3cret@redis.example:6380/2", "rediss://user:***@redis.example:6380/2"),
        ("redis://user@host/0", "redis://user@host/0"),
        ("unix://:s3cret@/var/redis/redis.sock?db=0", "unix://:***@/var/redis/redis.sock?db=0"),
        ("unix:///r.sock?db=1&password=s3cret", "unix:///r.sock?db=1&password=***"),
        ("unix:///r.sock", "unix:///r.sock"),
        ("redis://[::1", "***"),
        (
            "redis+sentinel://:s3cret@10.0.0.1:26379,10.0.0.2:26379/m/0?sentinel_password=s3cret",
            "redis+sentinel://:***@10.0.0.1:26379,10.0.0.2:26379/m/0?sentinel_password=***",
        ),
    ],
)
def test_redacted(url: str, shown: str) -> None:
    assert redacted(url) == shown
    assert "s3cret" not in redacted(url)
