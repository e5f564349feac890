"""KServe v2 / Open Inference Protocol: the transport-agnostic service and its gRPC and REST transports."""
