"""What the gRPC and HTTP fronts share: errors to statuses, listeners and their addresses,
TorchServe's HTTP conventions, exposure warnings."""
