"""The broker, as the gateway sees it, and the only part of the gateway besides ``app`` that knows Redis
(``scripts/check_boundaries.py``). The data plane depends on :mod:`.seam` only (job admission and a
reply source, with a neutral :class:`~.seam.BrokerUnavailable`), the rest of the gateway on its
:class:`~.seam.ClusterReader`; :mod:`.redis_admission`, :mod:`.redis_replies`,
:mod:`.reply_stream_keeper` and :mod:`.redis_reader` implement them on Redis streams, hashes and Lua
scripts. :mod:`.registry_events` drops the registry cache's entries on registry events and
:mod:`.token_keys` opens the token keys' connection."""
