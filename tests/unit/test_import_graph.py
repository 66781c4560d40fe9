"""The runtime's imports run one way: down the folders, with no circle anywhere.

The folders are the layers, lowest first: the foundations (`_base`), the store-neutral parts
of the stores (`_stores`: the contract, the record, the result encoding), the DynamoDB store's
wire path, the DynamoDB store, the Valkey store, the protocol (`_protocol`), and the front
ends at the top of the package. A module imports only from its own folder or a lower one, and
the protocol knows a store only by its contract.

Every import between the package's modules counts: at the top of a module, inside a
function (the lazy ones that keep cold starts cheap) and under `if TYPE_CHECKING:` (a
type-only circle still ties two modules into one idea). `_dev/` is drawn apart: it is the
laptop's tooling (CLI, doctor, local invoke), never imported by the runtime
(`test_layer.py` checks that), so what it imports cannot make a runtime circle; among its own
modules there is no circle either. An import of a module's own package (`from . import x`
runs the package's `__init__`, as importing any of its modules does) is no edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "layer" / "lambda_idempotency"
PACKAGE = "lambda_idempotency"

FOLDERS: list[str] = [
    "_base",
    "_stores",
    "_stores.dynamodb.wire",
    "_stores.dynamodb.direct",
    "_stores.dynamodb",
    "_stores.valkey",
    "_protocol",
    "",
]
"""Lowest first: a module imports only modules of its own folder or of a lower one. The Valkey
store sits above the DynamoDB store's folder only for the native key scheme (`NATIVE_KEYS`,
in `_stores.dynamodb.layout`) it shares, as the protocol does."""

FOUNDATION_LEAVES = {"_version"}
"""Modules at the top of the package that rank with the foundations: the version constant
sits where packaging tools look for it."""

TYPE_VOCABULARY = {"_options"}
"""The public option types (`Options`, `Clock`): any layer may name them in annotations, under
`if TYPE_CHECKING:` only, since nothing of theirs runs."""

PROTOCOL_MAY_NAME = {"_stores.dynamodb.layout"}
"""What the protocol may import of a store beyond the contract: the native key layout a
decorator without a store of its own defaults to (`NATIVE_KEYS`)."""


def _modules(*, dev: bool = False) -> list[str]:
    """Dotted names under the package (`_protocol.claiming`, `__init__` for the top): the
    runtime's, or with `dev` those of `_dev` (`_dev.cli.command`, `_dev.cli.__init__`)."""
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR).with_suffix("").parts
        if (parts[0] == "_dev") != dev:
            continue
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
            found.append(".".join(parts) + ".__init__")
        else:
            found.append(".".join(parts))
    return found


def _package_of(module: str) -> str:
    """The folder a module sits in ('' for the package's top)."""
    if module.endswith(".__init__"):
        return module.removesuffix(".__init__")
    return module.rpartition(".")[0]


def _file_of(module: str) -> Path:
    return PACKAGE_DIR / (module.replace(".", "/") + ".py")


def _resolve(base: str, *, dev: bool = False) -> str | None:
    """The module `base` names (a package means its `__init__`), or None when it is none of
    the package's runtime modules (with `dev`: none of `_dev`'s)."""
    if base == "" or (base.split(".", maxsplit=1)[0] == "_dev") != dev:
        return None
    if (PACKAGE_DIR / base.replace(".", "/") / "__init__.py").is_file():
        return base + ".__init__"
    return base if _file_of(base).is_file() else None


def _imports(module: str) -> set[tuple[str, int]]:
    """(imported module, line) for every import of another of the package's modules."""
    tree = ast.parse(_file_of(module).read_text(encoding="utf-8"))
    package = _package_of(module).split(".") if _package_of(module) else []
    found: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        bases: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            elif (node.module or "").startswith(f"{PACKAGE}."):
                base = (node.module or "").removeprefix(f"{PACKAGE}.")
            else:
                continue
            # `from . import claiming` imports modules; `from .engine import X`, one module
            bases = [base]
            bases += [f"{base}.{alias.name}".lstrip(".") for alias in node.names]
        elif isinstance(node, ast.Import):
            bases = [
                alias.name.removeprefix(f"{PACKAGE}.")
                for alias in node.names
                if alias.name.startswith(f"{PACKAGE}.")
            ]
        for base in bases:
            target = _resolve(base, dev=module.startswith("_dev"))
            if target is not None and target not in (module, *_own_packages(module)):
                found.add((target, node.lineno))
    return found


def _own_packages(module: str) -> list[str]:
    """The `__init__`s that run before `module` whatever it imports: its package's and
    theirs, up to the top (`__init__`)."""
    parts = _package_of(module).split(".") if _package_of(module) else []
    return [".".join([*parts[:depth], "__init__"]) for depth in range(len(parts) + 1)]


def _type_only_lines(module: str) -> set[int]:
    """The lines inside `if TYPE_CHECKING:` blocks."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(_file_of(module).read_text(encoding="utf-8"))):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _graph(*, dev: bool = False) -> dict[str, set[str]]:
    return {module: {target for target, _ in _imports(module)} for module in _modules(dev=dev)}


def _rank(module: str) -> int:
    if module in FOUNDATION_LEAVES:
        return 0
    folder = _package_of(module)
    while folder not in FOLDERS:
        folder = folder.rpartition(".")[0]
    return FOLDERS.index(folder)


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
    """Top-level, lazy (in a function), type-only and module imports all show up."""
    store = _graph()["_stores.dynamodb.store"]
    assert {"_base.errors", "_stores.record"} <= store  # top-level
    assert "_stores.dynamodb.operator_actions" in store  # inside `scan_stuck`, on first use
    assert "_stores.dynamodb.store_view" in _graph()["_stores.dynamodb.record_items"]  # type-only
    assert "_stores.dynamodb.wire.path" in _graph()["_stores.dynamodb.calls"]  # lazy
    decorators = _graph()["_decorators"]
    assert {"_options", "_protocol.durable"} <= decorators  # type-only; lazy
    assert "_protocol.completing" in _graph()["_protocol.claiming"]  # `from . import x`


def test_no_import_circle() -> None:
    assert _circles(_graph()) == []


def test_the_dev_graph_sees_every_kind_of_import() -> None:
    """`_dev`'s modules, with their top-level, lazy, type-only and `from . import` imports."""
    graph = _graph(dev=True)
    assert "_dev.local_tables" in graph["_dev.local"]  # top-level
    assert "_dev.local" in graph["_dev.cli.local_stack"]  # `from .. import local`, lazy
    assert "_dev.template" in graph["_dev.cli.run_functions"]  # type-only
    assert "_dev.cli.tables" in graph["_dev.cli.command"]  # `from . import tables`
    assert "_dev.cli.command" in graph["_dev.cli.__init__"]
    assert not any(target.startswith(("_base", "_stores")) for target in graph["_dev.local"])


def test_no_import_circle_in_dev() -> None:
    """The command's modules sit above what they use (`local`, `invoke`, `doctor`, ...), and
    a command group's module above what the groups share: nothing below imports them back."""
    assert _circles(_graph(dev=True)) == []


def test_every_module_sits_in_a_known_folder() -> None:
    unknown = [m for m in _modules() if _package_of(m) and not _package_of(m).startswith("_")]
    assert unknown == []
    assert {_package_of(m) for m in _modules()} <= set(FOLDERS)


def test_no_import_climbs_up_the_folders() -> None:
    upward = sorted(
        f"{module} -> {target} (line {line})"
        for module in _modules()
        for target, line in _imports(module)
        if _rank(target) > _rank(module)
        and not (target in TYPE_VOCABULARY and line in _type_only_lines(module))
    )
    assert upward == []


def test_the_protocol_knows_a_store_only_by_its_contract() -> None:
    """A second store plugs in under the protocol without the protocol changing."""
    named = sorted(
        f"{module} -> {target} (line {line})"
        for module in _modules()
        if module.startswith("_protocol.")
        for target, line in _imports(module)
        if target.startswith("_stores.dynamodb") and target not in PROTOCOL_MAY_NAME
    )
    assert named == []
