"""The Redis side of stateful models (TorchServe's sequence batching): a worker holds sequences and
reads each one's own job stream, one job at a time (docs/design.md, "Sequences")."""
