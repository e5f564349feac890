"""Sluice's shared library: everything that crosses a process boundary (keys, envelopes, records,
settings, logging, errors). Services import this package, never each other."""

__version__ = "0.1.0"
