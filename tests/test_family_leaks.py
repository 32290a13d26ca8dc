"""A family declares itself once: outside `models/`, no code branches on a family's name or class.

Every command asks the family's spec (models/base.py's `FamilySpec`) what a model can do; an
`if family == "t5"` or `isinstance(model, GPTLMHeadModel)` elsewhere is a leak, which makes a new
family an edit in many files. This test reads every module outside `bertology/models/` with `ast`
and fails on:

- a comparison (==, !=, in, not in, is) with a family's name or `model_type` as a string, alone or
  in a tuple, list or set;
- a dict literal keyed by such a string;
- `isinstance`, `issubclass` or `type(x) is` with a class defined in a family's module.

Naming a family as data (`--arch gpt` in a claim's settings, a help text) is not a branch. A few
dict keys spell a family's name without meaning the family: `ALLOWED_KEYS` lists them with why.
"""

import ast
import inspect
from importlib import import_module
from pathlib import Path

from bertology.models import FAMILIES

PACKAGE = Path(__file__).resolve().parents[1] / "bertology"
NAMES = {name for family in FAMILIES.values() for name in (family.name, *family.model_types)}
# (module, key): dict keys that spell a family's name but name something else.
ALLOWED_KEYS = {
    ("__init__.py", "static"),  # the Python API of the `bertology static` command group
    ("cli.py", "static"),  # the `bertology static` command group's help
    ("training/objectives.py", "bert"),  # --electra-masking bert: BERT's 80/10/10 masking recipe, a setting's value
}
CLASSES = {name for family in FAMILIES.values()
           for name, value in vars(import_module(family.module)).items()
           if inspect.isclass(value) and value.__module__ == family.module}


def strings(node: ast.AST) -> set[str]:
    """The string constants of a node: itself, or the elements of a tuple, list or set literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {s for element in node.elts for s in strings(element)}
    return set()


def class_names(node: ast.AST) -> set[str]:
    """The class names a node refers to: a name, an attribute's last part, or a tuple of those."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Tuple):
        return {n for element in node.elts for n in class_names(element)}
    return set()


def leaks(source: str, allowed_keys: frozenset[str] = frozenset()) -> list[tuple[int, str]]:
    """(line, what) for every branch on a family's name or class in `source` (dict keys in
    `allowed_keys` excepted)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            named = {s for side in (node.left, *node.comparators) for s in strings(side)} & NAMES
            if named:
                found.append((node.lineno, f"compares with the family name {sorted(named)[0]!r}"))
            if any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
                classes = {c for side in (node.left, *node.comparators) for c in class_names(side)} & CLASSES
                if classes:
                    found.append((node.lineno, f"compares a type with the family class {sorted(classes)[0]}"))
        elif isinstance(node, ast.Dict):
            named = {s for key in node.keys if key is not None for s in strings(key)} & NAMES - allowed_keys
            if named:
                found.append((node.lineno, f"a dict keyed by the family name {sorted(named)[0]!r}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
            classes = class_names(node.args[1]) & CLASSES
            if classes:
                found.append((node.lineno, f"{node.func.id} with the family class {sorted(classes)[0]}"))
    return found


def test_the_check_finds_what_it_looks_for():
    source = ("if family == 'gpt': pass\nif arch in ('t5', 'x'): pass\nd = {'elmo': 1}\n"
              "ok = isinstance(m, GPTLMHeadModel)\nsame = type(m) is T5ForConditionalGeneration\n"
              "fine = {'arch': 'gpt'}\nalso_fine = spec.generation == 'causal'\n")
    assert [line for line, _ in leaks(source)] == [1, 2, 3, 4, 5]


def test_no_module_outside_models_branches_on_a_family():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module.startswith("models/"):
            continue
        allowed = frozenset(key for where, key in ALLOWED_KEYS if where == module)
        found += [f"bertology/{module}:{line}: {what}" for line, what in leaks(path.read_text(encoding="utf-8"), allowed)]
    assert not found, "branches on a family outside models/ (ask its spec instead):\n" + "\n".join(found)
