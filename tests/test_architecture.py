"""The layers drawn in docs/architecture.md hold in the code: no module imports from a layer above its own.

The test reads the two tables of the page (the layers, and the few upward edges verl's public layout needs), so the
page and the check cannot drift apart: change the picture and the check changes with it.
"""

from __future__ import annotations

import ast
import pathlib
import re
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("verl", "recipe")
MODULE = re.compile(r"`([a-z_][a-z_0-9.]*)`")


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    where: str  # path:line


def _table_after(marker: str, text: str) -> list[list[str]]:
    """Rows (cells) of the first markdown table after the line holding ``marker``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if marker in line)
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set("".join(cells)) <= set("-: "):
            continue
        rows.append(cells)
    return rows[1:]  # without the header


def read_contract(text: str) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(module prefix -> layer number, allowed upward (importer prefix, imported prefix) pairs) from the page."""
    layers: dict[str, int] = {}
    for cells in _table_after("<!-- contract: layers -->", text):
        number = int(cells[0].split()[0])
        for prefix in MODULE.findall(cells[1]):
            layers[prefix] = number
    exceptions = []
    for cells in _table_after("<!-- contract: upward edges -->", text):
        importer, imported = MODULE.findall(cells[0]), MODULE.findall(cells[1])
        exceptions += [(a, b) for a in importer for b in imported]
    return layers, exceptions


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    """The layer of the longest listed prefix of ``module``."""
    best = max((p for p in layers if _matches(module, p)), key=len, default=None)
    return None if best is None else layers[best]


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool):
    """(imported module, line) for every import in ``tree``, at any depth, except under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:
                # `from a import b` imports the module a.b when b is one; the checker resolves that against the tree
                yield (f"{base}.{alias.name}" if alias.name != "*" else base), node.lineno
                yield base, node.lineno
        stack.extend(ast.iter_child_nodes(node))


def import_edges(root: pathlib.Path) -> tuple[list[Edge], set[str]]:
    """Every import between modules of the project's packages, and the set of module names."""
    files = {module_name(p, root): p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))}
    edges = []
    for module, path in files.items():
        seen = set()
        for target, line in _imports(ast.parse(path.read_text()), module, path.name == "__init__.py"):
            if target.split(".")[0] not in PACKAGES:
                continue
            # `from a import name`: yielded as both "a.name" and "a"; keep "a.name" only if it is a module
            while target not in files and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in files and target != module and target not in seen:
                seen.add(target)
                edges.append(Edge(module, target, f"{path.relative_to(root)}:{line}"))
    return edges, set(files)


def upward_edges(edges: list[Edge], layers: dict[str, int], exceptions: list[tuple[str, str]]) -> list[str]:
    bad = []
    for e in edges:
        if e.imported == "verl":  # the root package only re-exports DataProto and the version
            continue
        low, high = layer_of(e.importer, layers), layer_of(e.imported, layers)
        if low is None or high is None or high <= low:
            continue
        if any(_matches(e.importer, a) and _matches(e.imported, b) for a, b in exceptions):
            continue
        bad.append(f"{e.where}: {e.importer} (layer {low}) imports {e.imported} (layer {high})")
    return bad


@pytest.fixture(scope="module")
def contract():
    return read_contract(PAGE.read_text())


@pytest.fixture(scope="module")
def graph():
    return import_edges(ROOT)


def test_the_page_draws_layers_and_every_module_has_one(contract, graph):
    layers, _ = contract
    _, modules = graph
    assert len(set(layers.values())) >= 5, layers
    unplaced = sorted(m for m in modules if m not in PACKAGES and layer_of(m, layers) is None)
    assert not unplaced, f"modules in no layer of docs/architecture.md: {unplaced}"


def test_no_module_imports_a_higher_layer(contract, graph):
    layers, exceptions = contract
    edges, _ = graph
    assert len(edges) > 300  # the graph was really read
    bad = upward_edges(edges, layers, exceptions)
    assert not bad, "imports against docs/architecture.md's layers:\n" + "\n".join(bad)


def test_every_listed_upward_edge_is_still_used(contract, graph):
    """An exception nobody needs any more is removed from the page, so the picture stays exact."""
    layers, exceptions = contract
    edges, _ = graph
    unused = [
        (a, b) for a, b in exceptions if not any(_matches(e.importer, a) and _matches(e.imported, b) for e in edges)
    ]
    assert not unused, unused


def test_the_checker_sees_an_upward_import_inside_a_function(tmp_path):
    (tmp_path / "verl" / "utils").mkdir(parents=True)
    (tmp_path / "verl" / "trainer").mkdir()
    (tmp_path / "recipe").mkdir()
    for pkg in ("verl", "verl/utils", "verl/trainer", "recipe"):
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "verl" / "trainer" / "loop.py").write_text("X = 1\n")
    (tmp_path / "verl" / "utils" / "helper.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from verl.trainer import loop as _hint\n"
        "def f():\n    from ..trainer.loop import X\n    return X\n"
    )
    edges, _ = import_edges(tmp_path)
    layers = {"verl.utils": 1, "verl.trainer": 6}
    bad = upward_edges(edges, layers, [])
    assert bad == ["verl/utils/helper.py:5: verl.utils.helper (layer 1) imports verl.trainer.loop (layer 6)"]
    assert upward_edges(edges, layers, [("verl.utils.helper", "verl.trainer")]) == []
