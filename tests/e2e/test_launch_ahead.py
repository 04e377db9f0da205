"""``LaunchAhead`` (pure logic, no servers): each test gets its kind of server, the next test's
is launched before the current one runs, and what waits unused is stopped."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.e2e.launch_ahead import LaunchAhead, next_kind

KINDS = {"doomed_main": "main", "doomed_relay": "relay"}


@dataclass(eq=False)
class FakeItem:
    module: object
    fixturenames: list[str]


@dataclass
class FakeRequest:
    node: FakeItem
    session: object


@dataclass
class FakeSession:
    items: list[FakeItem]


@dataclass
class FakeServer:
    name: str


@dataclass
class FakeLaunched:
    server: FakeServer
    log: list[str]

    @property
    def names(self) -> tuple[str, ...]:
        return (self.server.name, f"proxy-{self.server.name}")

    def ready(self) -> FakeServer:
        self.log.append(f"ready {self.server.name}")
        return self.server


@dataclass
class FakeGroup:
    stopped: list[str] = field(default_factory=list)

    def stop_named(self, *names: str) -> None:
        self.stopped += names


def _session(*fixtures: list[str], module: object = "faults") -> FakeSession:
    return FakeSession([FakeItem(module, names) for names in fixtures])


def _request(session: FakeSession, index: int) -> FakeRequest:
    return FakeRequest(session.items[index], session)


def test_the_next_kind_is_the_next_test_of_the_module_that_needs_one():
    session = _session(["doomed_main"], ["colocated"], ["doomed_relay"], ["doomed_main"])
    assert next_kind(_request(session, 0), KINDS) == "relay"
    assert next_kind(_request(session, 2), KINDS) == "main"
    assert next_kind(_request(session, 3), KINDS) is None
    session.items.append(FakeItem("other-module", ["doomed_main"]))
    assert next_kind(_request(session, 3), KINDS) is None  # another module's: not launched


def _ahead(log: list[str], group: FakeGroup) -> LaunchAhead:
    counter = iter(range(100))

    def launcher(kind):
        def launch():
            name = f"{kind}-{next(counter)}"
            log.append(f"launch {name}")
            return FakeLaunched(FakeServer(name), log)

        return launch

    return LaunchAhead(group, {"main": launcher("main"), "relay": launcher("relay")}, KINDS)


def test_each_test_gets_a_server_launched_while_the_test_before_it_ran():
    log: list[str] = []
    group = FakeGroup()
    ahead = _ahead(log, group)
    session = _session(["doomed_main"], ["doomed_relay"], ["doomed_relay"], ["colocated"])
    first, names = ahead.take(_request(session, 0), "main")
    assert first.name == "main-0" and names == ("main-0", "proxy-main-0")
    assert log == ["launch main-0", "ready main-0", "launch relay-1"]  # the next, after ours
    second, _ = ahead.take(_request(session, 1), "relay")
    third, _ = ahead.take(_request(session, 2), "relay")
    assert (second.name, third.name) == ("relay-1", "relay-2")
    assert log[3:] == ["ready relay-1", "launch relay-2", "ready relay-2"]
    ahead.close()
    assert group.stopped == []  # nothing waits: the last test took the last server


def test_a_server_left_waiting_is_stopped_at_close():
    log: list[str] = []
    group = FakeGroup()
    ahead = _ahead(log, group)
    session = _session(["doomed_main"], ["doomed_relay"])
    ahead.take(_request(session, 0), "main")
    ahead.close()  # the relay test was skipped: its server never got past launching
    assert group.stopped == ["relay-1"]
