"""Counts a reader of the code cares about, for a checkout (default: this one).

    python scripts/code_metrics.py [ROOT]
    python scripts/code_metrics.py --tree [ROOT]

Prints the ``# fmt: skip`` count (the whole tree), functions over 60 lines in ``sglang_pdd/``
and ``patches/``, and the import circles inside ``sglang_pdd`` (strongly connected groups of
modules, imports inside functions included). ``--tree``: the package's layout instead, one
line per module (its lines and its docstring's first line).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

LONG = 60


def _modules(root: Path) -> dict[str, set[str]]:
    graph = {}
    for path in (root / "sglang_pdd").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang_pdd"):
                deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("sglang_pdd")}
        graph[name] = deps
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            group.append(v)
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(root: Path) -> None:
    skips = sum(
        line.rstrip().endswith("# fmt: skip")
        for path in root.rglob("*.py")
        if "build" not in path.parts
        for line in path.read_text().splitlines()
    )
    long_functions = []
    for folder in ("sglang_pdd", "patches"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > LONG:
                        long_functions.append((lines, f"{path.relative_to(root)}:{node.name}"))
    circles = _circles(_modules(root))
    print(f"fmt: skip: {skips}")
    print(f"functions over {LONG} lines: {len(long_functions)}")
    for lines, name in sorted(long_functions, reverse=True):
        print(f"  {lines:4d} {name}")
    print(f"import circles: {len(circles)}")
    for group in circles:
        print(f"  {' <-> '.join(group)}")


def tree(root: Path) -> None:
    for folder in ("sglang_pdd", "patches"):
        for path in sorted((root / folder).rglob("*.py")):
            text = path.read_text()
            doc = (ast.get_docstring(ast.parse(text)) or "").strip().split("\n")[0]
            print(f"{str(path.relative_to(root)):44} {len(text.splitlines()):4}  {doc[:90]}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--tree"]
    root = Path(args[0]) if args else Path(__file__).resolve().parents[1]
    (tree if "--tree" in sys.argv[1:] else main)(root)
