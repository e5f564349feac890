"""The model-API switch (TorchServe's ``enable_model_api``, off by default): registering a model runs
its code, so register and unregister must be switched on explicitly. List, describe, scale and
set-default always work.

Both management transports call :func:`require_model_api` before they register or unregister; the
error maps to REST 405 ``MethodNotAllowedException`` and gRPC PERMISSION_DENIED ``Model API
disabled\\norg.pytorch.serve.archive.model.ModelException``, TorchServe's answers.
"""

from sluice.errors import ErrorCode, SluiceError

MODEL_API_DISABLED = "Model API disabled"


def require_model_api(enabled: bool) -> None:
    """Raise unless the model API (register / unregister) is enabled."""
    if not enabled:
        raise SluiceError(ErrorCode.MODEL_API_DISABLED, MODEL_API_DISABLED)
