"""The management API: the transport-agnostic domain service, its gRPC and REST converters, token
authorization and the views DescribeModel and ListModels answer with."""
