"""The house rules, read from every module's AST: imports run one way, no cycles, no
private names across modules, no module over MAX_LINES, every folder a documented package.

Layers: dsl (the language) -> compiler (meaning, forms, numbers, analyses) -> exports
(what users see). A module may import its own layer or a lower one, never a higher one;
`TYPE_CHECKING` imports count for direction but not for cycles. tests/ and bench/ may
import anything. Function-level imports count like any other.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("dsl", "compiler", "exports")   # lowest first
MAX_LINES = 700


@dataclass(frozen=True)
class Edge:
    """One import: which module imports which, where, and whether only for type checking."""
    source: str
    target: str
    names: tuple[str, ...]
    line: int
    typing_only: bool


def module_files() -> dict[str, Path]:
    """Every project module by dotted name (`infest.compiler.core.ops`)."""
    found = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(("infest",) + parts)] = path
    return found


def _typing_blocks(tree: ast.Module) -> set[int]:
    """Line numbers inside `if TYPE_CHECKING:` blocks."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module a dotted name refers to (a module, or the package above a name)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports(modules: dict[str, Path]) -> list[Edge]:
    """Every import between project modules, function-level and TYPE_CHECKING included."""
    edges = []
    for source, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        typing = _typing_blocks(tree)
        for node in ast.walk(tree):
            for target, names in _targets(node, modules):
                edges.append(Edge(source, target, names, node.lineno, node.lineno in typing))
    return edges


def _targets(node: ast.AST, modules: dict[str, Path]) -> list[tuple[str, tuple[str, ...]]]:
    """(module, imported names) for one import statement; a submodule import is its own target."""
    if isinstance(node, ast.Import):
        return [(t, ()) for a in node.names if (t := _resolve(a.name, modules))]
    if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
        return []
    out = []
    for alias in node.names:
        sub = f"{node.module}.{alias.name}"
        if sub in modules:
            out.append((sub, ()))
        elif (t := _resolve(node.module, modules)):
            out.append((t, (alias.name,)))
    return out


MODULES = module_files()
EDGES = imports(MODULES)


def _layer(module: str) -> int:
    return LAYERS.index(module.split(".")[1])


def test_imports_run_one_way() -> None:
    upward = [f"{MODULES[e.source].relative_to(ROOT)}:{e.line}: {e.source} imports {e.target}"
              for e in EDGES if _layer(e.target) > _layer(e.source)]
    assert upward == []


def test_no_import_cycles() -> None:
    graph = nx.DiGraph((e.source, e.target) for e in EDGES
                       if not e.typing_only and e.source != e.target)
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    # a package __init__ that re-exports its own modules is not a cycle of logic
    cycles = [c for c in cycles if not _package_reexport(c)]
    assert cycles == []


def _package_reexport(component: list[str]) -> bool:
    """A two-node component of a package and one of its own modules (a facade)."""
    if len(component) != 2:
        return False
    a, b = component
    return b.startswith(a + ".") or a.startswith(b + ".")


def test_no_private_names_across_modules() -> None:
    private = [f"{MODULES[e.source].relative_to(ROOT)}:{e.line}: {n} from {e.target}"
               for e in EDGES for n in e.names if n.startswith("_") and e.source != e.target]
    assert private == []


def test_no_private_attributes_of_other_modules() -> None:
    """`ops._b` through a module alias counts like `from ops import _b`."""
    found = []
    for source, path in MODULES.items():
        tree = ast.parse(path.read_text())
        aliases = _module_aliases(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and aliases[node.value.id] != source):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert found == []


def _module_aliases(tree: ast.Module) -> dict[str, str]:
    """Local names bound to project modules (`from infest.compiler.core import ops`)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if f"{node.module}.{a.name}" in MODULES:
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in MODULES:
                    names[a.asname] = a.name
    return names


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_size_and_docstring(module: str) -> None:
    path = MODULES[module]
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"{path.relative_to(ROOT)} is over {MAX_LINES} lines"
    assert ast.get_docstring(ast.parse(text)), f"{path.relative_to(ROOT)} has no docstring"


def subpackages() -> list[Path]:
    """Every code folder below the top-level layers."""
    return sorted(p for layer in LAYERS for p in (ROOT / layer).rglob("*")
                  if p.is_dir() and p.name != "__pycache__")


def test_every_folder_is_a_package_named_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for folder in subpackages():
        rel = folder.relative_to(ROOT).as_posix()
        assert (folder / "__init__.py").is_file(), f"{rel} has no __init__.py"
        assert f"{rel}/" in readme, f"README's pipeline drawing does not name {rel}/"


def test_one_engine_class() -> None:
    """The engine profile is the only class called Engine (the serving pair is Serving)."""
    engines = [f"{m}" for m, p in MODULES.items()
               for n in ast.walk(ast.parse(p.read_text()))
               if isinstance(n, ast.ClassDef) and n.name == "Engine"]
    assert engines == ["infest.compiler.passes.engine"]
