"""The servers a benchmark cell runs against: the in-process limit, Sluice and TorchServe 0.12."""
