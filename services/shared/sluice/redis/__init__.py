"""Sluice's Redis: the keyspace, connections, the pipelined hot-path client, the control-plane client,
their errors, and URLs fit for logs. In the gateway and the worker only broker/ and app.py import it."""
