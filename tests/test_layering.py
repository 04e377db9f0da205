"""No import circle inside ``sglang_pdd``: every module's imports of the package (at module
level or inside functions) form a graph without cycles, so each layer can be read alone."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "sglang_pdd"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang_pdd"):
                deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("sglang_pdd")}
        graph[_module(path)] = deps
    return {mod: {d for d in deps if d in graph and d != mod} for mod, deps in graph.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(mod: str) -> list[str] | None:
        state[mod] = 1
        path.append(mod)
        for dep in sorted(graph[mod]):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[mod] = 2
        return None

    for mod in sorted(graph):
        if mod not in state and (found := visit(mod)):
            return found
    return None


def test_the_package_has_no_import_circle():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()))


def test_the_check_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


# The router's sub-packages, in the order a request goes through them: each imports only those
# after it (and the router's top-level modules), so the folder names read as the request's path.
ROUTER_LAYERS = ["api", "pipeline", "instances", "upstream"]


def _router_layer(mod: str) -> int | None:
    parts = mod.split(".")
    if parts[:2] == ["sglang_pdd", "router"] and len(parts) > 2 and parts[2] in ROUTER_LAYERS:
        return ROUTER_LAYERS.index(parts[2])
    return None


def test_the_routers_sub_packages_import_only_those_after_them():
    upward = [
        f"{mod} -> {dep}"
        for mod, deps in _graph().items()
        if (layer := _router_layer(mod)) is not None
        for dep in sorted(deps)
        if (dep_layer := _router_layer(dep)) is not None and dep_layer < layer
    ]
    assert not upward, upward
