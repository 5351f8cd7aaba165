"""The package's import graph, read from the source with ``ast``: it runs one way, as
``../shared/DESIGN.md`` draws it, and no module inside the package imports the package root.

Every import counts, also those inside functions: a lazy import still ties two modules together.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = "rag_fusion_chain"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

LAYERS: dict[str, int] = {
    "_version": -1,
    "validation": -1,  # imports nothing from the kit; every layer may use it
    # the bottom: no other module of the kit but those (fusion never imports models)
    "prompts": 0,
    "encoders": 0,
    "context": 0,
    "fusion": 1,
    "models": 1,
    "ingest": 1,
    "query_parsing": 1,
    # the parts the strategies are made of
    "queries": 2,
    "retrievers": 3,  # FusionRetriever.from_llm takes its query step from queries
    "offline": 5,
    "data": 4,  # the shipped sample, and its vectors checked with the stores' digest
    "strategies": 7,
    # composition
    "chains": 8,
    # the users of the chains
    "rendering": 9,
    "cli": 10,
    "serving_limits": 8,
    "serving": 9,
    "evaluate": 9,
}
"""Layer of each top-level module or subpackage: a module imports only from lower layers, or
from its own subpackage."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


def imported_modules(name: str) -> list[tuple[str, int]]:
    """The kit's modules ``name`` imports, with line numbers; a name taken from the package root
    that is not a submodule is reported as the root itself."""
    tree = ast.parse(modules()[name].read_text("utf-8"))
    package = name if is_package(name) else name.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((candidate if candidate in modules() else base, node.lineno))
    return [(module, line) for module, line in found if module.split(".")[0] == PACKAGE]


def layer_of(name: str) -> tuple[str, int]:
    top = name.split(".")[1]
    assert top in LAYERS, f"{name} has no layer in LAYERS: add it where DESIGN.md puts it"
    return top, LAYERS[top]


INSIDE = sorted(name for name in modules() if name != PACKAGE)


@pytest.mark.parametrize("name", INSIDE)
def test_no_module_imports_the_package_root(name: str) -> None:
    offending = [line for module, line in imported_modules(name) if module == PACKAGE]
    assert not offending, f"{name} imports {PACKAGE} itself (lines {offending})"


@pytest.mark.parametrize("name", INSIDE)
def test_imports_run_one_way(name: str) -> None:
    top, layer = layer_of(name)
    for module, line in imported_modules(name):
        if module == PACKAGE:
            continue
        other_top, other_layer = layer_of(module)
        assert other_top == top or other_layer < layer, (
            f"{name}:{line} imports {module}: layer {other_layer} is not below layer {layer}"
        )


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as a path that starts and ends at the same node, or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == "open":
                return [*path[path.index(successor) :], successor]
            if successor not in state and (cycle := visit(successor)):
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_a_cycle_and_only_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_there_is_no_import_circle() -> None:
    graph = {
        name: {module for module, _ in imported_modules(name) if module != name} for name in INSIDE
    }
    assert find_cycle(graph) is None


def exported_names(tree: ast.Module) -> list[str]:
    """The names a module's ``__all__`` lists: its strings, and the keys of a module-level dict
    it unpacks (``*_LAZY_NAMES``: the names the module loads on first access)."""
    assigned = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    listed = assigned.get("__all__")
    items = listed.elts if isinstance(listed, ast.List) else []
    unpacked = [ast.unparse(item.value) for item in items if isinstance(item, ast.Starred)]
    return [
        *(ast.literal_eval(item) for item in items if not isinstance(item, ast.Starred)),
        *(key for name in unpacked for key in ast.literal_eval(assigned[name])),
    ]


def test_every_dunder_all_names_only_what_the_module_defines_or_imports() -> None:
    for name, path in modules().items():
        exported = exported_names(ast.parse(path.read_text("utf-8")))
        private = [item for item in exported if item.startswith("_") and item != "__version__"]
        assert not private, f"{name}.__all__ lists private names {private}"
