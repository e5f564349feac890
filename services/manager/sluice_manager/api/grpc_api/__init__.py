"""The management API over gRPC (TorchServe's ``ManagementAPIsService``): servicers convert messages
and call :class:`~sluice_manager.api.management.ManagementService`; errors map in one place."""
