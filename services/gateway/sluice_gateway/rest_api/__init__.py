"""REST plumbing both protocol families share (aiohttp): the applications (:mod:`.server`), their
listeners and the error bodies. The routes are :mod:`sluice_gateway.torchserve.rest` and
:mod:`sluice_gateway.kserve.rest` (with Triton's generate extension in
:mod:`sluice_gateway.kserve.generate`); they convert HTTP to an
:class:`~sluice_gateway.dataplane.InferenceCall` and await the data plane once."""
