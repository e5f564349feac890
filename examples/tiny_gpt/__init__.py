"""tiny_gpt: a byte-level generative example model (no download) with TorchServe 0.12 handlers."""
