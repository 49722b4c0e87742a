"""Imports go one way: the library never reaches into the lab, no module imports itself back through others,
and imports sit at the top of their module.

Read from the source with ``ast`` (nothing of the package is imported), so a violation is reported as
``file: import`` even where importing the module would fail or be slow.

* Library: every module of ``mmspec`` except the lab's.
* Lab: ``mmspec.eval``, ``mmspec.training``, the zoo's builder modules (every module of ``mmspec.zoo`` except
  its face, :data:`ZOO_FACE`), and the command-line front (``mmspec.cli*``, ``mmspec.demo``, ``mmspec.__main__``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mmspec"

# the zoo's face: what `mmspec.zoo.load` / `metrics` / `available` need to load a shipped model (library)
ZOO_FACE = {"mmspec.zoo", "mmspec.zoo.entry", "mmspec.zoo.home", "mmspec.zoo.integrity", "mmspec.zoo.code_loader",
            "mmspec.zoo.vlm_loader", "mmspec.zoo.image_loader", "mmspec.zoo.image_classifier"}
LAB_PACKAGES = ("mmspec.eval", "mmspec.training")
LAB_FRONT = ("mmspec.cli", "mmspec.demo", "mmspec.__main__")  # plus mmspec.cli_* (the commands' own modules)

# Function-level imports of mmspec modules that must stay inside a function: {(importer, imported): why}.
# Keep this tiny; an optional dependency is better loaded through a documented hook (e.g.
# mmspec.kernels.dispatch.triton_module) than by an import statement in a function.
ALLOWED_FUNCTION_IMPORTS: dict[tuple[str, str], str] = {
    ("mmspec.cli", "mmspec.zoo.builder"): "the builders import diffusers' training classes (over a second); only "
                                          "`mmspec zoo build` pays for them, not every command's start-up",
}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # dotted module name (a package when a name is taken from its __init__)
    line: int
    in_function: bool
    path: Path

    def __str__(self) -> str:
        return f"{self.path.relative_to(PACKAGE.parent)}:{self.line}: import {self.imported}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def is_zoo_builder(name: str) -> bool:
    return name.startswith("mmspec.zoo.") and name not in ZOO_FACE


def is_lab(name: str) -> bool:
    return (any(name == p or name.startswith(p + ".") for p in LAB_PACKAGES) or name in LAB_FRONT
            or name.startswith("mmspec.cli_") or is_zoo_builder(name))


def _function_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes that run only when a function is called."""
    inside = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return inside


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = importer.split(".") if is_package else importer.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    # `from package import submodule` imports the submodule; `from module import name` the module
    return [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names]


def _imports() -> list[Import]:
    out = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        in_function = _function_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in dict.fromkeys(_targets(node, name, path.name == "__init__.py")):
                    if target == "mmspec" or target.startswith("mmspec."):
                        out.append(Import(name, target, node.lineno, id(node) in in_function, path))
    return out


IMPORTS = _imports()


def test_the_package_is_found():
    assert "mmspec.zoo" in MODULES and "mmspec.generator" in MODULES
    assert ZOO_FACE <= set(MODULES), f"face modules missing: {ZOO_FACE - set(MODULES)}"


def test_the_library_imports_no_lab_module():
    """Library modules (the zoo's face included) take nothing from eval, training, the zoo builders or the CLI,
    not even inside a function."""
    bad = [str(i) for i in IMPORTS if not is_lab(i.importer) and is_lab(i.imported)]
    assert not bad, "library modules importing lab modules:\n" + "\n".join(bad)


def test_training_imports_no_zoo_builder():
    """The zoo builders train with mmspec.training, so training never takes from the builders (one direction)."""
    bad = [str(i) for i in IMPORTS if i.importer.startswith("mmspec.training") and is_zoo_builder(i.imported)]
    assert not bad, "training modules importing zoo builders:\n" + "\n".join(bad)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, or of one importing itself (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    """Imports form no cycle: at module level a cycle works only by import order, and one closed by an import
    inside a function is a cycle hidden, not broken (so function-level imports count too)."""
    edges: dict[str, set[str]] = {}
    for i in IMPORTS:
        if i.imported in MODULES:
            edges.setdefault(i.importer, set()).add(i.imported)
    cycles = _cycles(edges)
    detail = []
    for comp in cycles:
        members = set(comp)
        detail += [str(i) + (" (in a function)" if i.in_function else "") for i in IMPORTS
                   if i.importer in members and i.imported in members]
    assert not cycles, f"import cycles {cycles}:\n" + "\n".join(detail)


def test_imports_are_at_module_top():
    """No mmspec module is imported inside a function, except the commented allow-list."""
    bad = [str(i) for i in IMPORTS if i.in_function and (i.importer, i.imported) not in ALLOWED_FUNCTION_IMPORTS]
    assert not bad, "function-level imports of mmspec modules:\n" + "\n".join(bad)


def test_the_allow_list_is_current():
    """Every allow-listed function-level import still exists (a stale entry would hide a new one)."""
    present = {(i.importer, i.imported) for i in IMPORTS if i.in_function}
    assert not set(ALLOWED_FUNCTION_IMPORTS) - present
