"""The router's I/O to SGLang servers, the last hop of a request's path: plain JSON posts and
SSE streams with SGLang's errors carried through (``calls``), an SSE stream read as a queue of
chunks with an idle limit (``chunk_queue``), and the supervised background loops that keep the
router's long-lived connections to instances alive (``supervised``). Nothing here knows PDD's
pipelines; ``router.pipeline`` and ``router.instances`` call it."""
