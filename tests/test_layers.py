"""The package's imports point one way: no cycles, and every module imports only its own folder or a lower layer.

Every import is read from the source with `ast`, module-level and inside functions alike
(a function-level import that dodges a cycle is still a cycle).
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "bertology"

# Lower number = lower layer. A module may import its own folder and any lower layer.
LAYERS = {
    "errors": 0,
    "files": 1, "memory": 1, "ops": 1, "text": 1,
    "checkpoint": 2, "config": 2, "plots": 2,
    "models": 3,
    "data": 4,
    "tasks": 5,
    "inference": 6,
    "training": 7,
    "recipes": 8, "uses": 8,
    "claims": 9,
    "cli": 10, "__main__": 11,
}
# What the model families may never reach (the list): training, data pipelines, tasks,
# export, serving, the CLI.
FORBIDDEN_FOR_MODELS = ("training", "data", "tasks", "inference", "recipes", "uses", "cli")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def resolve(name: str) -> str | None:
    """The package module an imported name belongs to (`bertology.models.bert.BertModel` -> `bertology.models.bert`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_in(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every bertology module that `source` (the code of `module`) imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for name in names:
            target = resolve(name) if name.startswith("bertology") else None
            # a module importing its own package's __init__ (or the package root) is not a dependency edge
            if target and target != module and not module.startswith(target + "."):
                found.add(target)
    return found


GRAPH = {module: imports_in(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
         for module, path in MODULES.items()}


def layer_of(module: str) -> tuple[str, int]:
    """(top folder or module name under bertology, its layer)."""
    top = module.split(".")[1] if "." in module else "__init__"
    return top, LAYERS.get(top, -1)


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in MODULES if m != "bertology" and layer_of(m)[1] < 0)
    assert not unplaced, f"modules with no layer in tests/test_layers.py: {unplaced}"


def test_no_import_cycles():
    """Tarjan's strongly connected components: any component of two or more modules is a cycle."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in GRAPH:
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_imports_point_down():
    upward = []
    for module, targets in GRAPH.items():
        if module == "bertology":
            continue
        top, layer = layer_of(module)
        for target in targets:
            target_top, target_layer = layer_of(target)
            if target != "bertology" and target_top != top and target_layer >= layer:
                upward.append(f"{module} -> {target}")
    assert not upward, "imports that point up or sideways:\n" + "\n".join(sorted(upward))


def test_models_import_only_the_bottom_row():
    breaches = [f"{module} -> {target}" for module, targets in GRAPH.items() if module.startswith("bertology.models")
                for target in targets if layer_of(target)[0] in FORBIDDEN_FOR_MODELS]
    assert not breaches, breaches


def test_the_training_layer_is_the_loop_and_the_objectives():
    """training/ knows no task and no model directory: task plumbing is tasks/'s and recipes/'s,
    opening directories inference/'s."""
    breaches = [f"{module} -> {target}" for module, targets in GRAPH.items() if module.startswith("bertology.training")
                for target in targets if layer_of(target)[0] in ("tasks", "inference")]
    assert not breaches, breaches


def test_no_module_name_stands_twice():
    """One module name once in the package: `static.py` in two folders makes every mention ambiguous."""
    names: dict[str, list[str]] = {}
    for module in MODULES:
        if module.rsplit(".", 1)[-1] != "__init__" and module != "bertology":
            names.setdefault(module.rsplit(".", 1)[-1], []).append(module)
    twice = {name: where for name, where in names.items() if len(where) > 1}
    assert not twice, twice


def test_the_checker_sees_function_level_imports():
    """An import hidden inside a function is an edge like any other, or the cycle test proves nothing."""
    source = "import torch\n\ndef f():\n    from ..training.loop import Trainer\n    return Trainer\n"
    assert imports_in(source, "bertology.models.bert") == {"bertology.training.loop"}
