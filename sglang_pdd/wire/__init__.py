"""What crosses process boundaries between the router and the instances, defined once.

* ``rids``: the rid suffixes that mark a sub-request's role on P and MD, and ``SubRids``, the
  rids one run of a client request takes on each instance.
* ``messages``: the control messages (router -> Main-Decode) and events (Main-Decode -> router)
  as tagged ``msgspec.Struct`` classes that both ends import.
* ``codec``: the one encoder and the two decoders (with their size, shape and range limits).

``rids`` imports nothing heavy: it is loaded in every SGLang process the plugin runs in.
"""
