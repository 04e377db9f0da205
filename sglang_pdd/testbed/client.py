"""Small synchronous HTTP clients for SGLang's ``/generate``, plain and through PD.

``pd_generate`` is what a PD load balancer does for SGLang's own disaggregation: post the same
body, with the prefill server's bootstrap address and a fresh room, to the prefill and decode
servers at once, and answer with the decode server's response.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field

import requests


@dataclass
class GenerateResult:
    """A finished ``/generate`` call: status, final body, and the stream's chunks if streamed."""

    status: int
    body: dict
    chunks: list[dict] = field(default_factory=list)
    ttft_s: float | None = None  # streaming: seconds until the first chunk carrying a token
    latency_s: float = 0.0
    # streaming: (seconds since the request was sent, tokens so far) for each chunk with tokens
    token_times: list[tuple[float, int]] = field(default_factory=list)

    @property
    def output_ids(self) -> list[int]:
        return list(self.body.get("output_ids", []))


def iter_sse(response: requests.Response):
    """Yield the JSON payloads of an SGLang server-sent-event stream, up to ``[DONE]``."""
    for raw in response.iter_lines():
        if not raw or not raw.startswith(b"data:"):
            continue
        data = raw[5:].strip()
        if data == b"[DONE]":
            return
        yield json.loads(data)


def generate(
    url: str, body: dict, stream: bool = False, timeout: float = 600, incremental: bool = False
) -> GenerateResult:
    """POST ``body`` to ``url/generate``; streaming collects every chunk. ``incremental``: the
    server streams only new ids and text (``--incremental-streaming-output``); the result's
    chunks and body are made cumulative, as SGLang's default stream is."""
    body = {**body, "stream": stream}
    start = time.monotonic()
    with requests.post(f"{url}/generate", json=body, stream=stream, timeout=timeout) as resp:
        if resp.status_code != 200 or not stream:
            try:
                payload = resp.json()
            except ValueError:
                payload = {"raw": resp.text}
            return GenerateResult(resp.status_code, payload, latency_s=time.monotonic() - start)
        chunks, ttft, times = [], None, []
        ids: list[int] = []
        text = ""
        for chunk in iter_sse(resp):
            if incremental:
                ids.extend(chunk.get("output_ids") or ())
                text += chunk.get("text") or ""
                chunk = {**chunk, "output_ids": list(ids), "text": text}
            n = len(chunk.get("output_ids") or ())
            if n and (not times or n > times[-1][1]):
                times.append((time.monotonic() - start, n))
                ttft = times[0][0]
            chunks.append(chunk)
    # SGLang's chunks are cumulative (text and output_ids so far), unless the server runs with
    # --incremental-streaming-output; the last chunk is the whole answer.
    final = dict(chunks[-1]) if chunks else {}
    return GenerateResult(200, final, chunks, ttft, time.monotonic() - start, times)


def generate_all(
    url: str, bodies: list[dict], timeout: float = 600, stream: bool = False
) -> list[GenerateResult]:
    """``generate`` for every body at once, answers in the bodies' order: a server batches
    them, so N answers cost about one."""
    from concurrent.futures import ThreadPoolExecutor

    if not bodies:
        return []
    with ThreadPoolExecutor(min(len(bodies), 32)) as pool:
        return list(
            pool.map(lambda body: generate(url, body, stream=stream, timeout=timeout), bodies)
        )


def pd_generate(
    prefill_url: str,
    bootstrap_port: int,
    decode_url: str,
    body: dict,
    stream: bool = False,
    bootstrap_host: str = "127.0.0.1",
    incremental: bool = False,
) -> GenerateResult:
    """One request through SGLang's own prefill/decode disaggregation."""
    body = {
        **body,
        "bootstrap_host": bootstrap_host,
        "bootstrap_port": bootstrap_port,
        "bootstrap_room": random.getrandbits(63),
    }
    prefill_result: list[GenerateResult] = []
    thread = threading.Thread(
        target=lambda: prefill_result.append(generate(prefill_url, body)), daemon=True
    )
    thread.start()
    result = generate(decode_url, body, stream=stream, incremental=incremental)
    thread.join(timeout=600)
    if prefill_result and prefill_result[0].status != 200 and result.status == 200:
        return prefill_result[0]
    return result


def instance_load(url: str) -> dict:
    """An SGLang server's ``/v1/loads`` entry (of its first DP rank): running and waiting
    requests, KV tokens used, and under ``disaggregation`` its PD queues."""
    data = requests.get(f"{url}/v1/loads", timeout=30).json()
    loads = data["loads"] if isinstance(data, dict) and "loads" in data else data
    return loads[0] if isinstance(loads, list) else loads


def wait_router_settled(router_url: str, timeout: float = 120) -> None:
    """Wait until the router's sub-requests that outlive their client requests have ended (for
    a request finished on Relay-Decode: Main-Decode has received and cached its KV)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = requests.get(f"{router_url}/get_server_info", timeout=30).json()
        if info["pdd_router"]["background_requests"] == 0:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the router at {router_url} still runs background sub-requests")


def wait_all_in_rotation(router_url: str, timeout: float = 120) -> None:
    """Wait until the router has every instance in rotation again (it takes one out after it
    failed a request and puts it back once its /health answers)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = requests.get(f"{router_url}/get_server_info", timeout=30).json()
        if not info["pdd_router"]["out_of_rotation"]:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the router at {router_url} keeps instances out of rotation")
