"""One request's way through PDD, after ``router.api`` decoded it: ``fanout`` splits a batch or
``n`` samples into sub-requests, ``run.ClientRun`` checks each one and asks ``RouterState.route``
for its pipeline and instances, ``pdd_request.PddRequestRun`` runs P-MD or P-RLD
(``relayed.RelayedPipeline`` runs P-RLD-MD and its handoff on it, a ``relayed_context.
RelayedContext``; ``relayed_record`` and ``relayed_release`` are its record-keeping and its
finish on Relay-Decode), ``migration`` moves it to other
instances when one fails, and ``record`` and ``text`` carry what happened and the answer's text
back to ``router.api``. Which request fields survive this trip is ``request_fields``. The
instances it talks to are in ``router.instances`` (what the router knows of them) and it talks
to them through ``router.upstream`` (HTTP posts and SSE streams)."""
