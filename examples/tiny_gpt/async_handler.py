"""tiny_gpt's async handler, for TorchServe 0.12 (``asyncCommunication: true``) and Sluice.

TorchServe's ``AsyncService`` awaits ``handle(data, context)`` once per request (one row), on one event
loop, with a private copy of the context. The handler generates token by token: every token but the last
goes out at once with ``send_intermediate_predict_response`` (a frame with ``ts_stream_next: true``
written to ``context.cl_socket``), then ``await asyncio.sleep(0)`` lets the other requests' coroutines
run; the last token is returned. The forms are those of ``tiny_gpt_forms``; a bad request is answered
with status 400 and an error body (not an exception: TorchServe's async frontend fails every request in
flight when a response frame's code is not 200).

The entry point is a class, not a module-level ``async def handle``: for a function entry point
TorchServe initializes with ``handle(None, context)``, which for a coroutine function only creates a
coroutine that is never awaited.
"""

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from ts.handler_utils.utils import send_intermediate_predict_response
from ts.torch_handler.base_handler import BaseHandler
from ts.utils.util import PredictionException

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


class TinyGPTAsyncHandler(BaseHandler):  # type: ignore[misc]  # ts is untyped
    def __init__(self) -> None:
        super().__init__()
        self.max_new_tokens = DEFAULT_MAX_NEW_TOKENS
        self.step_delay_s = 0.0

    def initialize(self, context: Any) -> None:
        model_dir = context.system_properties["model_dir"]
        serialized = ((context.manifest or {}).get("model") or {}).get("serializedFile")
        if not serialized:
            raise RuntimeError("tiny_gpt needs its weights as the archive's serialized file (tiny_gpt.pt)")
        self.model = model.TinyGPT.load(os.path.join(model_dir, serialized))
        handler_config = (context.model_yaml_config or {}).get("handler") or {}
        self.max_new_tokens = int(handler_config.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
        # A slower model for tests that need generations to last (each token takes this long more).
        self.step_delay_s = float(handler_config.get("step_delay_ms", 0)) / 1000
        self.initialized = True

    async def handle(self, data: list[dict[str, Any]], context: Any) -> list[str | dict[str, Any]]:
        if len(data) != 1:
            raise PredictionException(
                f"tiny_gpt's async handler takes one request per call, got {len(data)}", 500
            )
        try:
            request = forms.parse(data[0])
            budget = self.max_new_tokens if request.max_new_tokens is None else request.max_new_tokens
            generation = model.start(request.prompt, budget)
        except ValueError as exc:
            v2 = isinstance(exc, forms.RequestError) and exc.v2
            context.set_response_status(forms.BAD_REQUEST, str(exc), 0)
            context.set_response_content_type(0, JSON)
            return [forms.error_response(str(exc), v2)]
        if request.v2:
            context.set_response_content_type(0, JSON)
        while True:
            token = model.step(self.model, [generation])[0]
            response = forms.token_response(model.token_text(token), request.v2)
            if generation.done:
                return [response]
            send_intermediate_predict_response(
                [response], context.request_ids, "Intermediate Prediction success", 200, context
            )
            await asyncio.sleep(self.step_delay_s)
