"""examples/tiny_gpt: the model (batched == single, KV cache == recompute), the request forms, both
handlers driven the way TorchServe's worker drives them (``TsModelLoader`` on the unpacked archive,
``Service.predict`` / ``AsyncService``'s ``predict``), the reference driver and the real archiver."""

import asyncio
import json
import random
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import ts
import yaml
from sluice_worker import frames
from ts.async_service import AsyncService
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl
from ts.model_loader import TsModelLoader

from examples.tiny_gpt import archive, forms, model, reference

METRICS_CONFIG = Path(ts.__file__).parent / "configs" / "metrics.yaml"
DEFAULT_BUDGET = 6  # the test archives' handler.max_new_tokens
LONG = "The quick brown fox"  # runs 32+ tokens without EOS (checked where it matters)
SHORT = "Hi there"
ENDS_WITH_EOS = "What is 2+2?"  # EOS as its 6th token


def v2_body(prompt: str, **parameters: Any) -> dict[str, Any]:
    return {
        "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [prompt]}],
        "parameters": parameters,
    }


def v2_token(text: str) -> dict[str, Any]:
    return {"outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [1], "data": [text]}]}


# The model ------------------------------------------------------------------------------------------
def _prompts() -> list[bytes]:
    rng = random.Random(7)
    fixed = [b"Hello", LONG.encode(), b"a", ENDS_WITH_EOS.encode(), SHORT.encode(), b"x" * 300]
    return fixed + [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 120))) for _ in range(14)]


def test_weights_come_from_the_seed_and_leave_the_global_rng_alone() -> None:
    before = torch.random.get_rng_state()
    first, again, other = model.build_state_dict(0), model.build_state_dict(0), model.build_state_dict(1)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert first.keys() == model.STATE_SHAPES.keys()
    assert all(torch.equal(first[name], again[name]) for name in first)
    assert not torch.equal(first["tok_emb"], other["tok_emb"])
    assert all(tensor.dtype == torch.float64 for tensor in first.values())


def test_batched_iterations_choose_exactly_the_tokens_of_single_requests() -> None:
    gpt = reference.load_model()
    prompts = _prompts()
    budgets = [40 + (i % 3) * 7 for i in range(len(prompts))]
    expected = [reference.generate(prompt, budget) for prompt, budget in zip(prompts, budgets, strict=True)]
    assert any(tokens[-1] == "" for tokens in expected), "some generation should end at EOS"
    # Continuous batching: 5 slots, queued requests join as others finish (prefill and decode mixed).
    queued = list(range(len(prompts)))
    running: dict[int, model.Generation] = {}
    got: dict[int, list[str]] = {}
    while queued or running:
        while queued and len(running) < 5:
            index = queued.pop(0)
            running[index] = model.start(prompts[index], budgets[index])
        order = list(running)
        model.step(gpt, [running[index] for index in order])
        for index in order:
            if running[index].done:
                got[index] = running.pop(index).texts
    assert [got[index] for index in range(len(prompts))] == expected


def test_the_kv_cache_decodes_what_a_full_recompute_decodes() -> None:
    gpt = reference.load_model()
    for prompt in _prompts()[:8]:
        tokens, out = model.encode_prompt(prompt), list[int]()
        while len(out) < 24 and (not out or out[-1] != model.EOS):
            out.append(model.greedy(gpt.logits(tokens)[None])[0])
            tokens.append(out[-1])
        assert [model.token_text(token) for token in out] == reference.generate(prompt, 24)


def test_only_printable_ascii_and_eos_are_generated() -> None:
    texts = [text for prompt in _prompts() for text in reference.generate(prompt, 30)]
    assert all(text == "" or (len(text) == 1 and 32 <= ord(text) <= 126) for text in texts)


@pytest.mark.parametrize(
    ("prompt", "budget", "message"),
    [
        ("", 4, "the prompt is empty"),
        ("abc", 0, "at least 1"),
        ("abc", True, "must be an integer"),
        ("abc", 2.0, "must be an integer"),
        ("x" * 500, 12, "context of 512 tokens"),
    ],
)
def test_requests_the_model_refuses(prompt: str, budget: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        model.start(prompt, budget)


def test_the_context_limit_is_bos_plus_prompt_plus_generation() -> None:
    assert len(reference.generate("x" * 500, 11)) <= 11  # 1 + 500 + 11 = 512 fits
    with pytest.raises(ValueError, match="too long"):
        model.start("x" * 500, 12)


# Request forms -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"data": bytearray(b"Hello")}, forms.Request(b"Hello", None)),
        ({"data": bytearray(b"Hello"), "max_new_tokens": bytearray(b"7")}, forms.Request(b"Hello", 7)),
        ({"body": "Hello"}, forms.Request(b"Hello", None)),
        ({"body": {"prompt": "Hello", "max_new_tokens": 3}}, forms.Request(b"Hello", 3)),
        ({"body": bytearray(b'{"prompt": "Hi", "max_new_tokens": 2}')}, forms.Request(b"Hi", 2)),
        ({"body": b"\xff\x00raw"}, forms.Request(b"\xff\x00raw", None)),
        ({"prompt": bytearray(b"Hi"), "max_new_tokens": bytearray(b"3")}, forms.Request(b"Hi", 3)),
        ({"body": v2_body("Hello", max_tokens=5)}, forms.Request(b"Hello", 5, v2=True)),
        ({"body": v2_body("Hello", max_new_tokens=4)}, forms.Request(b"Hello", 4, v2=True)),
        ({"data": v2_body("Hello")}, forms.Request(b"Hello", None, v2=True)),
        (
            {
                "body": {
                    "inputs": [
                        {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [{"b64": "SGk="}]}
                    ]
                }
            },
            forms.Request(b"Hi", None, v2=True),
        ),
    ],
)
def test_request_forms(row: dict[str, Any], expected: forms.Request) -> None:
    assert forms.parse(row) == expected


@pytest.mark.parametrize(
    ("row", "v2"),
    [
        ({}, False),
        ({"body": {"text": "no prompt key"}}, False),
        ({"body": {"prompt": 5}}, False),
        ({"body": {"prompt": "x", "max_new_tokens": "many"}}, False),
        ({"body": v2_body("x", max_tokens="many")}, True),
        ({"body": {"inputs": []}}, True),
        ({"body": {"inputs": [{"name": "text_input", "data": ["a", "b"]}]}}, True),
    ],
)
def test_malformed_requests(row: dict[str, Any], v2: bool) -> None:
    with pytest.raises(forms.RequestError) as caught:
        forms.parse(row)
    assert caught.value.v2 is v2


# Handlers, loaded from the archives as TorchServe loads them ----------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both archives (real archiver), built once, with batch size 4 and a default budget of 6."""
    folder = tmp_path_factory.mktemp("store")
    return archive.build_archives(folder, batch_size=4, max_new_tokens=DEFAULT_BUDGET)


class FakeSocket:
    """``context.cl_socket``: records the intermediate frames ``send_intermediate_predict_response`` sends."""

    def __init__(self) -> None:
        self.frames: list[frames.PredictFrame] = []

    def sendall(self, data: bytes | bytearray) -> None:
        self.frames.append(frames.decode(data))


def _load(mar: Path, model_dir: Path) -> Any:
    with zipfile.ZipFile(mar) as unpacked:
        unpacked.extractall(model_dir)
    manifest = json.loads((model_dir / "MAR-INF" / "MANIFEST.json").read_text())
    metrics = MetricsCacheYamlImpl(config_file_path=str(METRICS_CONFIG))
    metrics.initialize_cache()
    metrics.model_name = manifest["model"]["modelName"]
    return TsModelLoader().load(
        manifest["model"]["modelName"],
        str(model_dir),
        manifest["model"]["handler"],
        None,
        4,
        None,
        metrics_cache=metrics,
    )


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """``load(mar)``: the archive unpacked, its folder on sys.path (as TorchServe's worker has it) and
    loaded through TsModelLoader; the archive's modules are forgotten afterwards."""

    def _loader(mar: Path) -> Any:
        model_dir = tmp_path / mar.stem
        monkeypatch.syspath_prepend(str(model_dir))
        service = _load(mar, model_dir)
        service.set_cl_socket(FakeSocket())
        return service

    yield _loader
    for name in [name for name in sys.modules if name.startswith("tiny_gpt_")]:
        del sys.modules[name]


def new_row(
    request_id: str, body: Any, name: str = "body", content_type: str = "application/json"
) -> dict[str, Any]:
    """A request in the form TorchServe's frontend sends it to the worker (decoded)."""
    return {
        "requestId": request_id.encode(),
        "headers": [],
        "parameters": [{"name": name, "contentType": content_type, "value": body}],
    }


def running_row(request_id: str) -> dict[str, Any]:
    """A request the backend already runs: id only, no parameters (the handler sees ``{}``)."""
    return {"requestId": request_id.encode(), "headers": [], "parameters": []}


def predict(service: Any, batch: list[dict[str, Any]]) -> dict[str, frames.FrameRow]:
    frame = frames.decode(service.predict(batch))
    assert frame.code == 200, frame.message
    assert [row.request_id for row in frame.rows] == [item["requestId"].decode() for item in batch]
    return {row.request_id: row for row in frame.rows}


def handler_of(service: Any) -> Any:
    return service._entry_point.__self__


def test_cb_handler_a_request_joins_mid_generation_and_finishes_first(
    store: dict[str, Path], load: Any
) -> None:
    service = load(store["tiny_gpt"])
    handler_module = sys.modules[type(handler_of(service)).__module__]
    assert handler_module.__name__ == "tiny_gpt_handler"
    assert handler_module.model.__name__ == "tiny_gpt_model"  # the archive's copies, not the repository's
    assert handler_module.forms.__name__ == "tiny_gpt_forms"
    long_expected, short_expected = reference.generate(LONG, 12), reference.generate(SHORT, 4)
    assert len(long_expected) == 12
    assert len(short_expected) == 4
    streamed: dict[str, list[str]] = {"a": [], "b": []}
    stream_next: dict[str, list[str]] = {"a": [], "b": []}
    for iteration in range(12):
        batch = [new_row("a", {"prompt": LONG, "max_new_tokens": 12}) if iteration == 0 else running_row("a")]
        if iteration == 3:
            batch.append(new_row("b", SHORT.encode(), name="data", content_type="application/octet-stream"))
            batch[-1]["parameters"].append(
                {"name": "max_new_tokens", "contentType": "text/plain", "value": "4"}
            )
        elif 3 < iteration < 7:
            batch.append(running_row("b"))
        rows = predict(service, batch)
        for request_id, row in rows.items():
            assert row.status_code == 200
            streamed[request_id].append(row.body.decode())
            stream_next[request_id].append(row.headers["ts_stream_next"])
    assert streamed == {"a": long_expected, "b": short_expected}
    assert stream_next["b"] == ["true"] * 3 + ["false"]
    assert stream_next["a"] == ["true"] * 11 + ["false"]
    assert handler_of(service).generations == {}


def test_cb_handler_ends_a_request_at_eos_and_uses_the_configured_default_budget(
    store: dict[str, Path], load: Any
) -> None:
    service = load(store["tiny_gpt"])
    eos_expected = reference.generate(ENDS_WITH_EOS, 32)
    default_expected = reference.generate(LONG, DEFAULT_BUDGET)
    assert eos_expected[-1] == ""
    assert len(eos_expected) < 32
    assert len(default_expected) == DEFAULT_BUDGET
    batch = [
        new_row("eos", {"prompt": ENDS_WITH_EOS, "max_new_tokens": 32}),
        new_row("default", LONG, content_type="text/plain"),
    ]
    streamed: dict[str, list[str]] = {"eos": [], "default": []}
    while batch:
        rows = predict(service, batch)
        for request_id, row in rows.items():
            streamed[request_id].append(row.body.decode())
        batch = [running_row(rid) for rid, row in rows.items() if row.headers["ts_stream_next"] == "true"]
    assert streamed == {"eos": eos_expected, "default": default_expected}
    assert handler_of(service).generations == {}


def test_cb_handler_drops_the_state_of_requests_the_server_stopped_sending(
    store: dict[str, Path], load: Any
) -> None:
    service = load(store["tiny_gpt"])
    predict(service, [new_row("a", {"prompt": LONG, "max_new_tokens": 20}), new_row("b", LONG)])
    predict(service, [running_row("a"), running_row("b")])
    handler = handler_of(service)
    assert set(handler.generations) == {"a", "b"}
    rows = predict(service, [running_row("b")])  # a's client went away
    assert set(handler.generations) == {"b"}
    assert rows["b"].body.decode() == reference.generate(LONG, DEFAULT_BUDGET)[2]
    # An id the handler does not know, sent as running, is refused (its state is gone).
    rows = predict(service, [running_row("b"), running_row("a")])
    assert rows["a"].status_code == 400
    assert rows["a"].headers["ts_stream_next"] == "false"
    assert rows["b"].status_code == 200


def test_cb_handler_fails_only_the_bad_requests_of_a_batch(store: dict[str, Path], load: Any) -> None:
    service = load(store["tiny_gpt"])
    predict(service, [new_row("good", {"prompt": LONG, "max_new_tokens": 5})])
    rows = predict(
        service,
        [
            running_row("good"),
            new_row("empty", ""),
            new_row("long", {"prompt": "x" * 600}),
            new_row("budget", {"prompt": "x", "max_new_tokens": 0}),
            new_row("v2", v2_body("x", max_tokens="many")),
        ],
    )
    assert rows["good"].status_code == 200
    assert rows["good"].headers["ts_stream_next"] == "true"
    assert rows["good"].body.decode() == reference.generate(LONG, 5)[1]
    for request_id, message in [
        ("empty", "the prompt is empty"),
        ("long", "too long"),
        ("budget", "at least 1"),
        ("v2", "must be an integer"),
    ]:
        row = rows[request_id]
        assert row.status_code == 400, request_id
        assert message in row.reason_phrase
        assert row.headers["ts_stream_next"] == "false"
        assert row.content_type == "application/json"
        body = json.loads(row.body)
        assert message in (body["error"] if request_id == "v2" else body["message"])
    assert set(handler_of(service).generations) == {"good"}


def test_cb_handler_answers_kserve_v2_requests_in_v2_json(store: dict[str, Path], load: Any) -> None:
    service = load(store["tiny_gpt"])
    batch = [
        new_row("v2", v2_body(SHORT, max_tokens=5)),
        new_row("plain", {"prompt": SHORT, "max_new_tokens": 5}),
    ]
    got: dict[str, list[Any]] = {"v2": [], "plain": []}
    for _ in range(5):
        rows = predict(service, batch)
        got["v2"].append(json.loads(rows["v2"].body))
        got["plain"].append(rows["plain"].body.decode())
        assert rows["v2"].content_type == "application/json"
        batch = [running_row("v2"), running_row("plain")]
    expected = reference.generate(SHORT, 5)
    assert got == {"v2": [v2_token(text) for text in expected], "plain": expected}
    assert rows["v2"].headers["ts_stream_next"] == "false"


# The async handler -----------------------------------------------------------------------------------
def async_service(service: Any) -> Any:
    AsyncService(service)  # replaces service.predict with TorchServe's async predict
    return service


async def test_async_handler_streams_every_token_but_the_last_as_an_intermediate(
    store: dict[str, Path], load: Any
) -> None:
    service = async_service(load(store["tiny_gpt_async"]))
    expected = reference.generate(LONG, 9)
    final = frames.decode(await service.predict([new_row("a", {"prompt": LONG, "max_new_tokens": 9})]))
    intermediates = service.cl_socket.frames
    assert [frame.rows[0].body.decode() for frame in intermediates] + [
        final.rows[0].body.decode()
    ] == expected
    assert all(
        frame.code == 200 and frame.rows[0].headers["ts_stream_next"] == "true" for frame in intermediates
    )
    assert final.code == 200
    assert final.rows[0].headers["ts_stream_next"] == "false"


async def test_async_handler_interleaves_concurrent_requests(store: dict[str, Path], load: Any) -> None:
    service = async_service(load(store["tiny_gpt_async"]))
    finals = await asyncio.gather(
        service.predict([new_row("a", {"prompt": LONG, "max_new_tokens": 8})]),
        service.predict([new_row("b", v2_body(SHORT, max_tokens=8))]),
    )
    order = [frame.rows[0].request_id for frame in service.cl_socket.frames]
    assert order[:4] == ["a", "b", "a", "b"]  # each coroutine yields between tokens
    streamed = {
        rid: [f.rows[0].body for f in service.cl_socket.frames if f.rows[0].request_id == rid] for rid in "ab"
    }
    final_a, final_b = (frames.decode(frame).rows[0] for frame in finals)
    assert [body.decode() for body in [*streamed["a"], final_a.body]] == reference.generate(LONG, 8)
    assert [json.loads(body) for body in [*streamed["b"], final_b.body]] == [
        v2_token(text) for text in reference.generate(SHORT, 8)
    ]
    assert final_b.content_type == "application/json"


async def test_async_handler_refuses_a_bad_request_with_its_own_status(
    store: dict[str, Path], load: Any
) -> None:
    service = async_service(load(store["tiny_gpt_async"]))
    final = frames.decode(await service.predict([new_row("a", {"prompt": "x" * 600, "max_new_tokens": 4})]))
    assert final.code == 200  # a failed frame would fail every request in flight on TorchServe
    assert final.rows[0].status_code == 400
    assert "too long" in json.loads(final.rows[0].body)["message"]
    assert service.cl_socket.frames == []
    # The default budget comes from model-config.yaml.
    final = frames.decode(await service.predict([new_row("b", LONG.encode(), name="data")]))
    tokens = [frame.rows[0].body.decode() for frame in service.cl_socket.frames] + [
        final.rows[0].body.decode()
    ]
    assert tokens == reference.generate(LONG, DEFAULT_BUDGET)


# The reference driver and the archiver ---------------------------------------------------------------
def test_drive_runs_the_continuous_batching_schedule() -> None:
    requests: list[tuple[str | bytes, int]] = [
        (LONG, 10),
        (SHORT, 3),
        (ENDS_WITH_EOS, 20),
        (b"\xffbytes", 4),
        ("z", 5),
    ]
    run = reference.drive(requests, batch_size=2)
    assert run.tokens == [reference.generate(prompt, budget) for prompt, budget in requests]
    assert max(run.batch_sizes) == 2
    assert sum(run.batch_sizes) == sum(len(tokens) for tokens in run.tokens)
    # SHORT finishes after 3 iterations; the third request takes its slot in the next one.
    assert run.admitted[2] >= run.token_times[1][-1]
    assert run.admitted[2] < run.token_times[0][3]
    for times in run.token_times:
        assert times == sorted(times)
    assert run.elapsed >= max(times[-1] for times in run.token_times)


def test_build_archives_with_the_real_archiver(tmp_path: Path) -> None:
    paths = archive.build_archives(tmp_path)
    assert paths == {"tiny_gpt": tmp_path / "tiny_gpt.mar", "tiny_gpt_async": tmp_path / "tiny_gpt_async.mar"}
    handlers = {"tiny_gpt": "tiny_gpt_handler.py", "tiny_gpt_async": "tiny_gpt_async_handler.py"}
    modes: dict[str, dict[str, Any]] = {
        "tiny_gpt": {"batchSize": 8, "maxBatchDelay": 5, "continuousBatching": True},
        "tiny_gpt_async": {"asyncCommunication": True},
    }
    for name, path in paths.items():
        with zipfile.ZipFile(path) as mar:
            assert sorted(mar.namelist()) == sorted(
                [
                    "MAR-INF/MANIFEST.json",
                    "model-config.yaml",
                    handlers[name],
                    "tiny_gpt_model.py",
                    "tiny_gpt_forms.py",
                    "tiny_gpt.pt",
                    "tiny_gpt_warmup.json",
                ]
            )
            warmup = json.loads(mar.read("tiny_gpt_warmup.json"))
            manifest = json.loads(mar.read("MAR-INF/MANIFEST.json"))
            config = yaml.safe_load(mar.read("model-config.yaml"))
            state = torch.load(mar.open("tiny_gpt.pt"), weights_only=True)
        assert manifest["archiverVersion"] == "0.12.0"
        assert manifest["runtime"] == "python"
        assert manifest["model"] == {
            "modelName": name,
            "serializedFile": "tiny_gpt.pt",
            "handler": handlers[name],
            "modelVersion": "1.0",
            "configFile": "model-config.yaml",
        }
        assert config == {
            "minWorkers": 1,
            "maxWorkers": 1,
            **modes[name],
            "warmupRequests": "tiny_gpt_warmup.json",
            "handler": {"max_new_tokens": 32},
        }
        assert warmup == [
            {"prompt": "warm up", "max_new_tokens": 2},
            {"prompt": "Hello", "max_new_tokens": 1},
        ]
        seeded = model.build_state_dict()
        assert all(torch.equal(state[key], seeded[key]) for key in seeded)


def test_archives_are_kept_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert archive.main([str(tmp_path), "--batch-size", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {tmp_path / 'tiny_gpt.mar'}",
        f"wrote {tmp_path / 'tiny_gpt_async.mar'}",
    ]
    first = (tmp_path / "tiny_gpt.mar").stat().st_mtime_ns
    archive.build_archives(tmp_path, batch_size=3)
    assert (tmp_path / "tiny_gpt.mar").stat().st_mtime_ns == first
    archive.build_archives(tmp_path, batch_size=3, force=True)
    with zipfile.ZipFile(tmp_path / "tiny_gpt.mar") as mar:
        assert yaml.safe_load(mar.read("model-config.yaml"))["batchSize"] == 3
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tiny_gpt.mar", "tiny_gpt_async.mar"]
