"""Models and their versions: registration and removal, archives (fetch, safe unpacking, manifest),
and per-version settings."""
