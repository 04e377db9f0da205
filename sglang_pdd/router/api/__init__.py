"""The router's HTTP front: SGLang's ``/generate``, OpenAI's ``/v1/completions`` and
``/v1/chat/completions``, health and operator endpoints (``app.py``), and the formats they speak:
typed request checks at the door (``request_model``), API keys (``auth``), OpenAI's request and
answer shapes (``openai_app``, ``openai_format``, ``openai_logprobs``, and ``openai_chat`` with
SGLang's own serving-chat code) and the SSE helpers of streamed answers (``streaming``). A
request leaves here as one or more sub-requests for ``router.pipeline``
(``pipeline.fanout.start_runs`` makes a ``pipeline.run.ClientRun`` of each) and comes back as
its token deltas, which these modules turn into the client's answer."""
