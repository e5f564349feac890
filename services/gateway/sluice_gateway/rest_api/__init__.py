"""The REST transport (aiohttp): TorchServe's inference API and KServe v2 REST on
``inference_address``. Handlers convert HTTP to an :class:`~sluice_gateway.dataplane.InferenceCall`,
await the data plane once and convert the reply back; errors map once, in one middleware."""
