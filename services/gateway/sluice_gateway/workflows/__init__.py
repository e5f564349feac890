"""Workflows (TorchServe ``.war``): a DAG of member models run as ordinary jobs, callable through
``/wfpredict`` and, as a model of the same name, through KServe v2 and TorchServe gRPC."""
