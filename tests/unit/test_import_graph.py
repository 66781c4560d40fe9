"""The runtime's imports run one way: no circle, and no module importing one above it.

Every import between the package's modules counts: at the top of a module, inside a
function (the lazy ones that keep cold starts cheap) and under `if TYPE_CHECKING:` (a
type-only circle still ties two modules into one idea). `_dev/` is left out: it is the
laptop's tooling (CLI, doctor, local invoke), never imported by the runtime
(`test_layer.py` checks that), so what it imports cannot make a runtime circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "layer" / "lambda_idempotency"
PACKAGE = "lambda_idempotency"

LAYERS: list[tuple[str, ...]] = [
    # leaves: no import of the package
    (
        "_version",
        "_clock",
        "_errors",
        "_value",
        "_canonical",
        "_tenant",
        "_item_size",
        "_batch_processors",
        "_wire_parse",
        "_wire_request",
    ),
    # values and shapes; the record format; the wire path's plan and guard
    ("_record", "_cache", "_encoding", "_execution", "_metrics", "_wire_plan"),
    ("_callables", "_waiting", "_observe", "_layout", "_wire_guard"),
    # the layouts (record format and key hashing), the wire path's request and exchange
    ("_keys", "_powertools_layout", "_wire_build"),
    ("_wire_send",),
    ("_wire_lean",),
    ("_wire_check",),
    ("_wire",),
    ("_store",),
    # what uses the store
    ("_limits", "_durable", "_store_contract"),
    ("_options",),
    # the protocol's steps, the engine that runs them in order, its driver for coroutines
    ("_engine",),
    ("_replaying", "_completing"),
    ("_claiming",),
    ("_protocol",),
    ("_async",),
    ("_decorators",),
    ("_batch", "_http"),
    ("__init__", "__main__", "testing"),
]
"""Lowest first: a module imports only modules of lower layers, never its own or higher."""

RANK = {module: index for index, layer in enumerate(LAYERS) for module in layer}


def _modules() -> list[str]:
    return sorted(path.stem for path in PACKAGE_DIR.glob("*.py"))


def _imports(module: str) -> set[tuple[str, int]]:
    """(imported module, line) for every import of another of the package's modules."""
    tree = ast.parse((PACKAGE_DIR / f"{module}.py").read_text(encoding="utf-8"))
    found: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = node.module
            elif node.level == 0 and (node.module or "").startswith(f"{PACKAGE}."):
                base = (node.module or "").removeprefix(f"{PACKAGE}.")
            else:
                continue
            # `from . import _encoding` imports modules; `from ._store import X`, one module
            targets = [alias.name for alias in node.names] if base is None else [base]
        elif isinstance(node, ast.Import):
            targets = [
                alias.name.removeprefix(f"{PACKAGE}.")
                for alias in node.names
                if alias.name.startswith(f"{PACKAGE}.")
            ]
        for target in targets:
            top = target.split(".")[0]
            if top not in ("_dev", module):
                found.add((top, node.lineno))
    return found


def _graph() -> dict[str, set[str]]:
    return {module: {target for target, _ in _imports(module)} for module in _modules()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_graph_sees_every_kind_of_import() -> None:
    """Top-level, lazy (in a function) and type-only imports all show up."""
    store = _graph()["_store"]
    assert {"_errors", "_record"} <= store  # top-level
    assert "_wire" in store  # inside `_caller`, on first use
    decorators = _graph()["_decorators"]
    assert {"_options", "_durable"} <= decorators  # type-only; lazy


def test_no_import_circle() -> None:
    assert _circles(_graph()) == []


def test_every_module_has_a_layer() -> None:
    modules = set(_modules())
    assert modules - set(RANK) == set(), "place each new module in LAYERS"
    assert set(RANK) - modules == set(), "LAYERS names a module that does not exist"


def test_no_import_climbs_up() -> None:
    upward = sorted(
        f"{module} -> {target} (line {line})"
        for module in _modules()
        for target, line in _imports(module)
        if module in RANK and target in RANK and RANK[target] >= RANK[module]
    )
    assert upward == []
