"""TorchServe's inference API: the gRPC service, the REST routes and the OpenAPI description."""
