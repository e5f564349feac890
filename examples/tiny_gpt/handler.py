"""tiny_gpt's continuous-batching handler, for TorchServe 0.12 (``continuousBatching: true``) and Sluice.

``handle(data, context)`` runs once per iteration with every running request plus the new ones;
``context.request_ids`` maps batch index -> request id, stable across iterations. A new request brings
its body, a running one arrives as ``{}``. Per request id the handler keeps a ``Generation`` (KV cache,
tokens so far, budget) and returns one token per request (see ``tiny_gpt_forms`` for the forms). It sets
``context.stopping_criteria``: TorchServe calls entry ``i`` with response ``i`` and sends
``ts_stream_next: false`` (the request's last response) when it returns True; the criterion then drops
the request's state. A request id missing from ``context.request_ids`` was dropped by the server (its
client went away), so its state is dropped too. A bad request gets status 400 and an error body and
ends at once; the other requests in the batch carry on.

In the model archive ``tiny_gpt_model.py`` and ``tiny_gpt_forms.py`` sit next to this file.
"""

import functools
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from ts.torch_handler.base_handler import BaseHandler

if TYPE_CHECKING:
    from examples.tiny_gpt import forms, model
else:
    try:  # inside the model archive
        import tiny_gpt_forms as forms
        import tiny_gpt_model as model
    except ModuleNotFoundError:  # run from the Sluice repository
        from examples.tiny_gpt import forms, model

logger = logging.getLogger(__name__)

DEFAULT_MAX_NEW_TOKENS = 32
JSON = "application/json"


class TinyGPTHandler(BaseHandler):  # type: ignore[misc]  # ts is untyped
    def __init__(self) -> None:
        super().__init__()
        self.generations: dict[str, model.Generation] = {}
        self.step_delay_s = 0.0
        self.v2: set[str] = set()  # request ids answered in KServe v2 form
        self.max_new_tokens = DEFAULT_MAX_NEW_TOKENS

    def initialize(self, context: Any) -> None:
        model_dir = context.system_properties["model_dir"]
        serialized = ((context.manifest or {}).get("model") or {}).get("serializedFile")
        if not serialized:
            raise RuntimeError("tiny_gpt needs its weights as the archive's serialized file (tiny_gpt.pt)")
        self.model = model.TinyGPT.load(os.path.join(model_dir, serialized))
        handler_config = (context.model_yaml_config or {}).get("handler") or {}
        self.max_new_tokens = int(handler_config.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
        # A slower model for tests that need generations to last (each iteration takes this long more).
        self.step_delay_s = float(handler_config.get("step_delay_ms", 0)) / 1000
        self.initialized = True
        logger.info("tiny_gpt loaded from %s (default max_new_tokens %d)", serialized, self.max_new_tokens)

    # BaseHandler.handle runs preprocess -> inference -> postprocess with self.context set.
    def preprocess(self, data: list[dict[str, Any]]) -> list[str | dict[str, Any]]:
        """Per batch index: the request id of a live generation, or the error body of a rejected request."""
        request_ids = [self.context.request_ids[idx] for idx in range(len(data))]
        self._forget_vanished(set(request_ids))
        plan: list[str | dict[str, Any]] = []
        for idx, (request_id, row) in enumerate(zip(request_ids, data, strict=True)):
            if not row and request_id in self.generations:
                plan.append(request_id)  # running: its body came with its first iteration
                continue
            try:
                self._admit(request_id, row)
            except ValueError as exc:
                plan.append(self._reject(idx, exc))
                continue
            plan.append(request_id)
        return plan

    def inference(self, plan: list[str | dict[str, Any]]) -> list[int | dict[str, Any]]:
        """One model iteration over the live generations (new ones prefill, running ones decode)."""
        live = [entry for entry in plan if isinstance(entry, str)]
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        tokens = dict(zip(live, model.step(self.model, [self.generations[rid] for rid in live]), strict=True))
        return [tokens[entry] if isinstance(entry, str) else entry for entry in plan]

    def postprocess(self, outputs: list[int | dict[str, Any]]) -> list[str | dict[str, Any]]:
        responses: list[str | dict[str, Any]] = []
        criteria = []
        for idx, output in enumerate(outputs):
            request_id = self.context.request_ids[idx]
            if isinstance(output, dict):  # an error body: this request ends now
                responses.append(output)
                criteria.append(_stop)
                continue
            v2 = request_id in self.v2
            responses.append(forms.token_response(model.token_text(output), v2))
            if v2:
                self.context.set_response_content_type(idx, JSON)
            criteria.append(functools.partial(self._finished, request_id))
        self.context.stopping_criteria = criteria
        return responses

    # Per-request state ---------------------------------------------------------------------------
    def _admit(self, request_id: str, row: dict[str, Any]) -> None:
        if not row:
            raise forms.RequestError("no prompt: a new request needs a body")
        self._forget(request_id)  # a known id with a body again starts over
        request = forms.parse(row)
        budget = self.max_new_tokens if request.max_new_tokens is None else request.max_new_tokens
        try:
            self.generations[request_id] = model.start(request.prompt, budget)
        except ValueError as exc:
            raise forms.RequestError(str(exc), v2=request.v2) from exc
        if request.v2:
            self.v2.add(request_id)

    def _reject(self, idx: int, exc: ValueError) -> dict[str, Any]:
        message = str(exc)
        v2 = isinstance(exc, forms.RequestError) and exc.v2
        logger.info("tiny_gpt rejected request %s: %s", self.context.request_ids[idx], message)
        self.context.set_response_status(forms.BAD_REQUEST, message, idx)
        self.context.set_response_content_type(idx, JSON)
        return forms.error_response(message, v2)

    def _finished(self, request_id: str, _response: object) -> bool:
        """The stopping criterion of a live request: True (and its state dropped) once it is done."""
        generation = self.generations.get(request_id)
        if generation is not None and not generation.done:
            return False
        self._forget(request_id)
        return True

    def _forget_vanished(self, present: set[str]) -> None:
        for request_id in [rid for rid in self.generations if rid not in present]:
            logger.info("tiny_gpt dropped request %s: the server no longer sends it", request_id)
            self._forget(request_id)

    def _forget(self, request_id: str) -> None:
        self.generations.pop(request_id, None)
        self.v2.discard(request_id)


def _stop(_response: object) -> bool:
    return True
