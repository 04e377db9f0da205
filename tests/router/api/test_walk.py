"""One chat request's walk through the router's files, recorded from the running code
(``walk.py``): at most 8 files, none entered twice (the structure docs/structures.md walks)."""

from __future__ import annotations

import pytest

from tests.router.api.walk import walk


@pytest.mark.parametrize(("stream", "n"), [(True, 1), (False, 2)])
def test_a_chat_enters_at_most_8_files_each_once(tiny_model, stream, n):
    traced, answers = walk(str(tiny_model), stream=stream, n=n)
    files = traced.files()
    assert len(files) <= 8 and not traced.twice(), traced.render()
    # The walk reaches the instances: the request did go through PDD.
    assert files[0] == "router/api/app.py" and "router/upstream/chunk_queue.py" in files
    assert all(b"chatcmpl-" in answer for answer in answers)
