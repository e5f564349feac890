"""The ``sluice`` command line: start and stop Sluice's processes (Redis, manager, gateway) locally,
with TorchServe's flag spellings."""
