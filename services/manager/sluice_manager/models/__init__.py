"""Models and their versions: registration (one :class:`~sluice_manager.models.registration.Registrar`
for the management API's operations and the startup models) and removal, archives (fetch, safe
unpacking, manifest), and per-version settings."""
