"""What the router knows and keeps about the instances it routes to: each Main-Decode site
(``main_site.MainSite``) with its control socket (``main_control``), its KV cache as its events
report it (``kv_events``) and the transfers on its link (``transfers``, claimed on a Prefill's
ledger through ``ledger_client``); every instance's ``/v1/loads`` (``loads``), health and
circuit breaker (``health``, ``breaker``) and the operator's drain (``drain``). ``RouterState``
reads these to route a request (``router.pipeline``); the pipeline updates them as the request
runs. The bytes themselves travel through ``router.upstream``."""
