"""Launch the server a module's next test needs of its own while the current test runs.

A server's start is mostly Python imports, one process at a time at first: one of CI's two cores
sits idle for ~15 of its ~30 s. Tests that kill the server they use (``test_faults.py``) each
need a fresh one; launched one test ahead, its start overlaps the previous test instead of
adding to the suite's time. Only one server waits ahead at a time (CI's 24 GB).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pytest

from sglang_pdd.testbed.launcher import ServerGroup, ServerProcess


class Launched(Protocol):
    """A launched, still-starting ``server``: ``names`` are every process it has once
    ``ready()`` (which waits for it) has returned."""

    server: ServerProcess
    names: tuple[str, ...]

    def ready(self) -> Any: ...


@dataclass(frozen=True)
class LaunchedServer:
    """One plain ``ServerGroup.launch``-ed server."""

    group: ServerGroup
    server: ServerProcess

    @property
    def names(self) -> tuple[str, ...]:
        return (self.server.name,)

    def ready(self) -> ServerProcess:
        self.group.wait_ready(self.server)
        return self.server


def next_kind(request: pytest.FixtureRequest, kinds: dict[str, str]) -> str | None:
    """The kind (``kinds``: fixture name -> kind) that the next test of this module using one
    of ``kinds``' fixtures needs, in the session's run order; None if no later test does."""
    items = request.session.items
    here = request.node
    if here not in items:
        return None
    for item in items[items.index(here) + 1 :]:
        if item.module is not here.module:
            return None
        for name in item.fixturenames:
            if name in kinds:
                return kinds[name]
    return None


class LaunchAhead:
    """Hands each test its server of a kind (launched one test ahead when the order says so).

    ``launchers`` maps a kind to a function launching one such server (without waiting);
    ``kinds`` maps the module's fixture names to the kind each needs.
    """

    def __init__(
        self,
        group: ServerGroup,
        launchers: dict[str, Callable[[], Launched]],
        kinds: dict[str, str],
    ) -> None:
        self._group = group
        self._launchers = launchers
        self._kinds = kinds
        self._waiting: dict[str, Launched] = {}

    def take(self, request: pytest.FixtureRequest, kind: str) -> tuple[Any, tuple[str, ...]]:
        """The ready server of ``kind`` for ``request``'s test and its names in the group; the
        next test's server is launched before this returns."""
        launched = self._waiting.pop(kind, None) or self._launchers[kind]()
        ready = launched.ready()
        upcoming = next_kind(request, self._kinds)
        if upcoming is not None and upcoming not in self._waiting:
            self._waiting[upcoming] = self._launchers[upcoming]()
        return ready, launched.names

    def close(self) -> None:
        """Stop what waits unused (a later test skipped or deselected)."""
        for launched in self._waiting.values():
            self._group.stop_named(launched.server.name)  # nothing else of it started yet
        self._waiting.clear()
