"""tiny_gpt's plain streaming handler: no continuous batching, for TorchServe 0.12 and Sluice.

One ``handle(data, context)`` call generates every token of one request (the archive sets ``batchSize:
1``): every token but the last goes out at once with ``send_intermediate_predict_response`` (a frame
with ``ts_stream_next: true``), the last is returned. The worker runs nothing else meanwhile, so each
streaming job has the worker to itself from its first token to its last: the baseline continuous
batching is measured against (``make bench-generate``). The forms are those of ``tiny_gpt_forms``; a
bad request is answered with status 400 and an error body.

In the model archive ``tiny_gpt_model.py`` and ``tiny_gpt_forms.py`` sit next to this file.
"""

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
INTERMEDIATE = "Intermediate Prediction success"


class TinyGPTStreamHandler(BaseHandler):  # type: ignore[misc]  # ts is untyped
    def __init__(self) -> None:
        super().__init__()
        self.max_new_tokens = DEFAULT_MAX_NEW_TOKENS

    def initialize(self, context: Any) -> None:
        model_dir = context.system_properties["model_dir"]
        serialized = ((context.manifest or {}).get("model") or {}).get("serializedFile")
        if not serialized:
            raise RuntimeError("tiny_gpt needs its weights as the archive's serialized file (tiny_gpt.pt)")
        self.model = model.TinyGPT.load(os.path.join(model_dir, serialized))
        handler_config = (context.model_yaml_config or {}).get("handler") or {}
        self.max_new_tokens = int(handler_config.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
        self.initialized = True

    def handle(self, data: list[dict[str, Any]], context: Any) -> list[str | dict[str, Any]]:
        if len(data) != 1:
            raise PredictionException(
                f"tiny_gpt's streaming handler takes one request per call (batchSize 1), got {len(data)}",
                500,
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
            send_intermediate_predict_response([response], context.request_ids, INTERMEDIATE, 200, context)
