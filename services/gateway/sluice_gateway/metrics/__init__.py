"""Prometheus metrics of the gateway: TorchServe's inference counters (gRPC and REST alike) and
Sluice's cluster gauges read from Redis at scrape time, served on ``metrics_address``."""
