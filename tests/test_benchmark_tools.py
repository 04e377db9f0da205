"""Pieces of ``benchmark/`` that reach into the router or parse streams: they fail here, not
in a measurement, when the router's code moves or a stream is split differently."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmark"


def _script(name: str):
    """``benchmark/NAME.py`` as a module; its folder on ``sys.path``, as when run as a script
    (it may import its neighbours)."""
    if str(BENCHMARK) not in sys.path:
        sys.path.insert(0, str(BENCHMARK))
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARK / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 50_000), min_size=1, max_size=12),
    st.lists(st.integers(1, 40), min_size=1, max_size=30),
    st.booleans(),
)
def test_the_parsing_relay_forwards_every_id_once_however_reads_split_the_stream(
    ids, cuts, incremental
):
    """``relays``' parsing relay (``router_overhead.py --parsing-relay``) writes each id
    once and ends with ``[DONE]`` whatever bytes each read of the server's stream holds."""
    import orjson

    relays = _script("relays")
    events = []
    for i in range(len(ids)):
        chunk_ids = [ids[i]] if incremental else ids[: i + 1]
        meta = {"finish_reason": None, "prompt_tokens": 3}
        events.append({"text": "t", "output_ids": chunk_ids, "meta_info": meta})
    stream = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    relay = relays.ParsedChunks(incremental)
    written = b""
    start = 0
    for cut in cuts * (len(stream) // sum(cuts) + 1):
        if start >= len(stream):
            break
        written += relay.forward(stream[start : start + cut])
        start += cut
    frames = [f for f in written.split(b"\n\n") if f]
    assert frames[-1] == b"data: [DONE]"
    out = [orjson.loads(f[len(b"data: ") :]) for f in frames[:-1]]
    got = (
        [i for chunk in out for i in chunk["output_ids"]] if incremental else out[-1]["output_ids"]
    )
    assert got == ids
    assert all(chunk["meta_info"]["id"] == relay.rid for chunk in out)


def test_the_tcp_relay_pipes_every_byte_both_ways_and_closes_with_its_upstream():
    """``relays.tcp_relay`` (``router_overhead.py --tcp-relay``): what the client sends
    reaches the upstream whole, the upstream's answer (large enough to fill the socket buffers,
    so that flow control runs) reaches the client whole, and the upstream closing closes the
    client's connection."""
    import hashlib
    import socket
    import subprocess
    import threading
    import time

    from sglang_pdd.testbed.ports import free_port

    upstream = socket.create_server(("127.0.0.1", 0))
    request = bytes(range(256)) * 4096  # 1 MiB
    answer = hashlib.sha256(request).digest() * (1 << 17)  # 4 MiB
    received = []

    def serve_once() -> None:
        conn, _ = upstream.accept()
        with conn:
            got = b""
            while len(got) < len(request):
                got += conn.recv(1 << 16)
            received.append(got)
            conn.sendall(answer)

    threading.Thread(target=serve_once, daemon=True).start()
    port = free_port()
    code = (
        f"import sys; sys.path.insert(0, {str(BENCHMARK)!r}); from relays import tcp_relay; "
        f"tcp_relay({port}, '127.0.0.1', {upstream.getsockname()[1]})"
    )
    relay = subprocess.Popen([sys.executable, "-c", code])  # as router_overhead.py starts it
    try:
        deadline = time.monotonic() + 60
        while True:  # until the relay's process listens
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=60)
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline or relay.poll() is not None:
                    raise
                time.sleep(0.05)
        with client:
            client.sendall(request)
            got = bytearray()
            while chunk := client.recv(1 << 16):  # b"": the relay closed it
                got += chunk
        assert received == [request]
        assert bytes(got) == answer
    finally:
        relay.terminate()
        relay.wait(timeout=60)
        upstream.close()


def test_run_names_every_measurement_and_each_parses_its_flags(capsys):
    """``benchmark/run.py MEASUREMENT --help`` loads each measurement and prints its flags;
    every script with a ``main`` under ``benchmark/`` is one of them."""
    import pytest

    run = _script("run")
    modules = {module for module, _ in run.MEASUREMENTS.values()}
    with_main = {p.stem for p in BENCHMARK.glob("*.py") if "\ndef main(" in p.read_text()}
    assert with_main - {"run"} == modules
    for name in run.MEASUREMENTS:
        with pytest.raises(SystemExit) as exit_:
            run.main([name, "--help"])
        assert exit_.value.code == 0
        assert f"usage: run.py {name}" in capsys.readouterr().out
    assert run.main(["no-such-measurement"]) == 2


MAX_FUNCTION_LINES = 60


def test_no_benchmark_function_is_over_60_lines():
    """Every function under ``benchmark/`` (``main`` included) reads in one screen: a long
    measurement is split into named steps."""
    import ast

    long = [
        f"{path.name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in sorted(BENCHMARK.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, long
