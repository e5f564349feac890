"""The gRPC transport: servicers convert messages and call the data plane; errors map in one place."""
