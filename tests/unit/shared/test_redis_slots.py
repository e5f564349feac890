"""Redis Cluster's key slots as Redis computes them, and the key that routes each command."""

import pytest
from sluice.redis import keys
from sluice.redis.slots import command_key, key_slot


@pytest.mark.parametrize(
    ("key", "slot"),
    # Values from Redis's CLUSTER KEYSLOT (and its specification's hash-tag examples).
    [("foo", 12182), ("bar", 5061), ("", 0), ("{user1000}.following", 3443), ("foo{}{bar}", 8363)],
)
def test_a_key_hashes_to_the_slot_redis_gives_it(key: str, slot: int) -> None:
    assert key_slot(key) == slot
    assert key_slot(key.encode()) == slot


def test_hash_tags_decide_the_slot() -> None:
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers") == key_slot("user1000")
    assert key_slot("foo{{bar}}zap") == key_slot("{bar")
    assert key_slot("foo{bar}{zap}") == key_slot("bar")
    assert key_slot(keys.job_stream("m", "1")) == key_slot(keys.cancel("m", "1", "job"))
    assert key_slot(keys.CELERY_PREFIX + "queue") == key_slot(keys.CELERY_PREFIX + "unacked")


@pytest.mark.parametrize(
    ("command", "key"),
    [
        (("GET", "k"), "k"),
        (("XADD", b"s", "*", "f", "v"), b"s"),
        (("EVALSHA", "sha", 2, "a", "b", "arg"), "a"),
        (("EVAL", "return 1", 0), None),
        (("XREADGROUP", "GROUP", "g", "c", "COUNT", 1, "BLOCK", 5, "STREAMS", "s", ">"), "s"),
        (("xread", "streams", "s", "$"), "s"),
        (("PING",), None),
        (("PUBLISH", "channel", "m"), None),
        (("WAIT", 1, 100), None),
        (("MULTI",), None),
    ],
)
def test_the_routing_key_of_a_command(
    command: tuple[str | bytes | int, ...], key: str | bytes | None
) -> None:
    assert command_key(command) == key
