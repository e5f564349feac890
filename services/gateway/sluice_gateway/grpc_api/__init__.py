"""gRPC plumbing both protocol families share: the grpc.aio server, health and reflection
(:mod:`.server`) and bidirectional calls (:mod:`.bidi_call`)."""

import grpc

# The context of an rpc registered without (de)serializers: raw request bytes in, raw bytes out.
RawContext = grpc.aio.ServicerContext[bytes, bytes]
