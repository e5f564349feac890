"""Workflows (TorchServe ``.war`` archives): reading them, registering their member models, and the
management API's workflow calls (docs/workflows.md)."""
