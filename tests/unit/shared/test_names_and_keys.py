import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.redis import keys
from sluice.registry import names


@pytest.mark.parametrize("name", ["mnist", "resnet-18", "a.b_c", "A1", "x" * 128])
def test_valid_names(name: str) -> None:
    assert names.is_valid(name)


@pytest.mark.parametrize(
    "name", ["", "../etc", "a/b", "a\x00b", "{x}", "a:b", "*", "-lead", ".hidden", "x" * 129, "ünï"]
)
def test_invalid_names(name: str) -> None:
    assert not names.is_valid(name)


def test_check_model_name_raises_not_found_with_printable_text() -> None:
    with pytest.raises(SluiceError) as info:
        names.check_model_name("bad\x00name")
    assert info.value.code is ErrorCode.MODEL_NOT_FOUND
    assert "\x00" not in info.value.message


def test_version_keys_share_one_hash_tag() -> None:
    tagged = [
        keys.version_config("m", "1.0"),
        keys.job_stream("m", "1.0"),
        keys.workers("m", "1.0"),
        keys.heartbeat("m", "1.0", "9000"),
        keys.cancel("m", "1.0", "job"),
        keys.dead_letters("m", "1.0"),
    ]
    assert {key.split("{")[1].split("}")[0] for key in tagged} == {"m:1.0"}
    assert all(key.startswith("sluice:") for key in tagged)


def test_gateway_keys_share_one_hash_tag() -> None:
    assert keys.reply_stream("g1").split("}")[0] == keys.gateway_alive("g1").split("}")[0]
