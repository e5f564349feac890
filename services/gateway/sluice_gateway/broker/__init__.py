"""The broker, as the gateway sees it. The data plane depends on :mod:`.seam` only (job admission and a
reply source, with a neutral :class:`~.seam.BrokerUnavailable`); :mod:`.redis_admission`,
:mod:`.redis_replies` and :mod:`.reply_stream_keeper` implement it on Redis streams and Lua scripts."""
