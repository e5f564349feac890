"""Sluice's gateway: a stateless grpc.aio front that turns inference calls into jobs on Redis streams
and answers them from the replies workers send to the gateway's own reply stream."""
