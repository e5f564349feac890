"""The management API over REST (aiohttp, ``management_address``): TorchServe's routes, JSON shapes
and status codes. Handlers convert HTTP into one :class:`~sluice_manager.api.management.ManagementService`
call and its answer back; errors map once, in one middleware."""
