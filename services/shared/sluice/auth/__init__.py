"""Token authorization, as TorchServe does it: key material, the shared key store, one policy for
refusals, and its gRPC interceptor and HTTP middleware."""
