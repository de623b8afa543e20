"""The package's import structure, as a newcomer would walk it.

    python scripts/structure.py [--src src/ssmbench] [--doc docs/ARCHITECTURE.md] [--list]

Reads every module of the package with ``ast`` (nothing is imported) and prints:

- units: the rows of the library table in docs/ARCHITECTURE.md (a module, a subpackage,
  or a module of one that the table lists on its own, such as ``lm/matrix``), and any
  top-level module or subpackage it does not list;
- edges: unit A imports unit B at module level (imports inside functions are lazy, and
  listed apart);
- levels: the longest chain of module-level imports below each unit (0: imports none);
- upward edges: A imports B although B sits below A in the library table, which lists
  the units bottom to top ("a module imports only those above it");
- circles: groups of modules (files, not units) that import each other at module level;
- units the library table does not name.

With ``--list`` it also prints every edge.  Exits 0; the numbers are for reading.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = "ssmbench"


def module_name(path: Path, src: Path) -> str:
    rel = path.relative_to(src.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path, name: str, known: set[str]) -> tuple[set[str], set[str]]:
    """(module-level, lazy) imports of package modules by the module ``name`` at
    ``path``, as dotted names (``ssmbench.models.common``); ``from pkg import mod`` of a
    module in ``known`` imports that module (its package's ``__init__`` runs first, but
    that is Python's doing, not a dependency the code states)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top, lazy = set(), set()
    for node in ast.walk(tree):
        found = []
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            named = [f"{base}.{a.name}" for a in node.names]
            found = [n for n in named if n in known] or [base]
            found += [base] if any(n not in known for n in named) and found != [base] else []
        found = [f for f in found if f == PACKAGE or f.startswith(PACKAGE + ".")]
        if not found:
            continue
        in_function = any(
            isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef))
            for parent in _parents(tree, node)
        )
        (lazy if in_function else top).update(found)
    return top, lazy


def _parents(tree, target):
    """The ancestors of ``target`` in ``tree``."""
    stack = [(tree, [])]
    while stack:
        node, chain = stack.pop()
        if node is target:
            return chain
        for child in ast.iter_child_nodes(node):
            stack.append((child, [*chain, node]))
    return []


def table_order(doc: Path) -> list[str]:
    """The units the library table of ``doc`` names, bottom to top, in its order."""
    text = doc.read_text()
    start = text.index("The library, bottom to top")
    order = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|") and not line.startswith("|--") and not line.startswith("| module"):
            order += [n.rstrip("/") for n in re.findall(r"`([a-z_./]+)`", line.split("|")[1])]
        elif order and not line.startswith("|"):
            break
    return order


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def levels(graph: dict[str, set[str]]) -> dict[str, int]:
    """The longest import chain below each node (a circle's members share one level)."""
    memo: dict[str, int] = {}

    def level(v, seen):
        if v in memo:
            return memo[v]
        below = [level(w, seen | {v}) + 1 for w in graph.get(v, ()) if w not in seen | {v}]
        memo[v] = max(below, default=0)
        return memo[v]

    for v in graph:
        level(v, frozenset())
    return memo


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default="src/ssmbench")
    parser.add_argument("--doc", default="docs/ARCHITECTURE.md")
    parser.add_argument("--list", action="store_true", help="print every edge too")
    args = parser.parse_args(argv)
    src = Path(args.src)
    files = sorted(src.rglob("*.py"))
    modules = {module_name(p, src): p for p in files}
    top_edges, lazy_edges = defaultdict(set), defaultdict(set)
    for name, path in modules.items():
        top, lazy = imports(path, name, set(modules))
        for kind, found in ((top_edges, top), (lazy_edges, lazy)):
            for target in found:
                # the longest known module the name starts with (a name may be an object)
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target in modules and target != name:
                    kind[name].add(target)
    module_graph = {m: top_edges.get(m, set()) for m in modules}
    order = table_order(Path(args.doc))
    listed = set(order)

    def unit(name: str) -> str:
        """The library table's row of a module: the most specific name it lists
        (``lm/matrix`` before ``lm/``), else the top-level module or subpackage."""
        parts = name.split(".")[1:]
        for n in range(len(parts), 0, -1):
            if "/".join(parts[:n]) in listed:
                return "/".join(parts[:n])
        return parts[0] if parts else PACKAGE

    unit_graph: dict[str, set[str]] = defaultdict(set)
    for a, targets in module_graph.items():
        for b in targets:
            if unit(a) != unit(b):
                unit_graph[unit(a)].add(unit(b))
    units = sorted({unit(m) for m in modules} - {PACKAGE})
    for u in units:
        unit_graph.setdefault(u, set())
    unit_graph.pop(PACKAGE, None)
    for targets in unit_graph.values():
        targets.discard(PACKAGE)
    position = {u: i for i, u in enumerate(order)}
    upward = sorted(
        (a, b)
        for a, targets in unit_graph.items()
        for b in targets
        if a in position and b in position and position[b] > position[a]
    )
    lvl = levels(unit_graph)
    circles = cycles(module_graph)
    everything = {m: module_graph[m] | lazy_edges.get(m, set()) for m in modules}
    lazy_circles = [c for c in cycles(everything) if c not in circles]
    edges = sum(len(t) for t in unit_graph.values())
    lazy = sum(len(t) for t in lazy_edges.values())
    print(f"modules (files): {len(modules)}")
    print(f"units (top-level modules and subpackages): {len(units)}")
    print(f"unit edges (module-level imports): {edges}; lazy imports (in functions): {lazy}")
    print(f"levels: {max(lvl.values(), default=0) + 1}")
    print(f"upward edges (against docs' library table): {len(upward)}")
    for a, b in upward:
        print(f"  {a} -> {b}")
    print(f"circles (modules importing each other at module level): {len(circles)}")
    for group in circles:
        print("  " + " <-> ".join(group))
    print(f"circles through lazy imports too: {len(lazy_circles)}")
    for group in lazy_circles:
        print("  " + " <-> ".join(group))
    unnamed = [u for u in units if u not in position]
    print(f"units the library table does not name: {len(unnamed)}")
    for u in unnamed:
        print(f"  {u}")
    if args.list:
        for a in sorted(unit_graph):
            print(f"{a} (level {lvl[a]}): {', '.join(sorted(unit_graph[a]))}")


if __name__ == "__main__":
    main()
