"""Real text and real labels that every Python installation carries: the standard library's documentation.

`bertology demo` needs unlabeled text to pre-train on and a labelled task to fine-tune on,
offline and on any machine. Both come from the standard library itself:

- the docstrings of its .py files, read with `ast` (never imported: importing `this` or
  `antigravity` has side effects), and
- `pydoc_data/topics.py`, the language reference as plain text (what `help("assert")` shows).

The labelled task asks which part of the standard library a docstring comes from (see
`LABEL_PACKAGES`). Train and dev are split by module file, so near-identical docstrings of
one file never sit on both sides, and the pre-training corpus leaves the dev modules out, so
the evaluation text is never seen, not even unlabeled.

On CPython 3.11 this gives ~5,650 docstrings, collected in ~2 s (3.10-3.13 are within a
few percent). The pre-training corpus (all docstrings but the dev modules' ones, plus the 79
reference topics) is ~1.5 MB, ~240k words. On the task, a TF-IDF (words and word pairs) +
logistic-regression baseline gets ~72% dev accuracy against a majority rate of ~21%, so
there is room for pre-training to show. Nothing here imports torch."""

from __future__ import annotations

import ast
import inspect
import os
import random
import re
import sysconfig
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import UserError
from ..files import write_text_atomic

# The labels of the task, each a part of the standard library that is in every CPython
# 3.10-3.13 (no GUI packages: Debian and Fedora ship tkinter and idlelib separately), spans
# many module files (so a by-file split is possible) and has 150+ docstrings. Docstrings
# (train/dev with seed 0 on CPython 3.11; train before the `max_train_per_label` cap):
#     asyncio      300  (194/106)
#     email        291  (181/110)
#     http+urllib  226  (130/96)
#     importlib    275  (177/98)
#     unittest     161  (101/60)
#     xml          217  (136/81)
# http and urllib share a label because both are about web requests; alone each is smaller.
LABEL_PACKAGES: dict[str, tuple[str, ...]] = {
    "asyncio": ("asyncio",),
    "email": ("email",),
    "http+urllib": ("http", "urllib"),
    "importlib": ("importlib",),
    "unittest": ("unittest",),
    "xml": ("xml",),
}


# Folders never read: tests and their data (some files there do not even parse), caches,
# third-party packages, and folders whose name is no package name (lib-dynload, config-3.x-*).
_SKIP_DIRS = frozenset({"__pycache__", "test", "tests", "idle_test", "site-packages"})


# Top-level packages left out so the corpus is the same on a full install and a distribution's
# minimal Python: tkinter, idlelib, turtledemo, distutils and lib2to3 are separate packages on
# Debian (and the last two are gone from 3.12/3.13); encodings' docstrings are ~90 copies of
# "Python Character Mapping Codec ... generated from ... with gencodec.py".
_SKIP_PACKAGES = frozenset({"distutils", "encodings", "idlelib", "lib2to3", "tkinter", "turtledemo"})


_MIN_WORDS = 5  # shorter docstrings ("Close the file.") say too little to classify or learn from


_MIN_LABEL_DOCSTRINGS = 40  # a label with fewer (a stripped-down stdlib) is left out of the task


_TOPICS_FILE = Path("pydoc_data", "topics.py")


# reST heading underlines and table borders ("*****", "+-----+====+"): layout, not text.
_RULE_LINE = re.compile(r"[-=*+~^#_|:. ]+")


@dataclass(frozen=True)
class Docstring:
    """One docstring of the standard library.

    `text` is cleaned for reading as prose: `inspect.cleandoc`, then paragraphs (runs of
    lines between blank lines) have their lines joined by single spaces, doctest examples
    and reST rules/table rows are removed (see `paragraphs`), and the paragraphs are joined
    by "\\n\\n".
    """

    module: str  # dotted module name: "email.mime.text", "asyncio" (for asyncio/__init__.py)
    package: str  # top-level name: "email", "asyncio", "threading"
    kind: str  # "module", "class" or "function" (methods and async functions included)
    name: str  # qualified name inside the module ("Future.cancel"); the module name for "module"
    text: str


@dataclass
class DocTask:
    """The labelled task: which part of the standard library (a label) a docstring comes from.

    `train` and `dev` hold (text, label) pairs, the text one line (paragraphs joined by
    spaces). No module has docstrings on both sides; `dev_modules` names the held-out ones,
    for `write_pretraining_corpus(exclude_modules=...)`.
    """

    train: list[tuple[str, str]]
    dev: list[tuple[str, str]]
    labels: tuple[str, ...]
    dev_modules: frozenset[str]


def stdlib_root() -> Path:
    """The folder of the running Python's standard library (also right inside a virtualenv)."""
    return Path(sysconfig.get_paths()["stdlib"])


def paragraphs(text: str) -> list[str]:
    """Split documentation text into paragraphs of prose, each one line.

    Paragraphs are separated by blank lines; the lines of a paragraph are joined with single
    spaces. Dropped, as code or layout rather than prose (which is what the sentence splitter
    and the model are made for): doctest examples, from a ">>>" line to the end of its
    paragraph (where doctest's expected output ends too); reST heading underlines and table
    borders; and table rows (lines starting with "|"). Indented blocks stay: in docstrings
    they are as often argument lists and notes as code.

    >>> paragraphs("Add two numbers.\\n\\nFor example:\\n>>> add(1, 2)\\n3\\n\\nTitle\\n=====\\nmore")
    ['Add two numbers.', 'For example:', 'Title more']
    """
    found: list[str] = []
    kept: list[str] = []
    in_doctest = False
    for line in [*text.splitlines(), ""]:
        stripped = line.strip()
        if not stripped:
            if kept:
                found.append(" ".join(" ".join(kept).split()))  # split() also folds \f, \u2028, ...
            kept, in_doctest = [], False
        elif in_doctest or stripped.startswith(">>>"):
            in_doctest = True
        elif not (_RULE_LINE.fullmatch(stripped) or stripped.startswith("|")):
            kept.append(stripped)
    return found


def collect_docstrings(root: str | os.PathLike | None = None) -> list[Docstring]:
    """Every usable docstring of the standard library's .py files, in a fixed order.

    Files are parsed with `ast`, never imported, in sorted path order, and the docstrings of a
    file in source order (module, then classes and functions as they appear, nested ones
    included). Skipped: test folders, site-packages, caches, the packages in `_SKIP_PACKAGES`,
    files that do not decode or parse, docstrings with fewer than `_MIN_WORDS` words once
    cleaned (see `Docstring`), and repeats of an earlier docstring's text (the same text in
    two modules would leak across a by-module split).

    Args:
        root: the standard library folder; default `stdlib_root()`.

    Returns:
        The docstrings, possibly none (an empty or zipped standard library).
    """
    return list(_collect(Path(root) if root is not None else stdlib_root()))


@lru_cache(maxsize=4)  # parsing ~600 files takes ~2 s; the demo and the tests ask repeatedly
def _collect(root: Path) -> tuple[Docstring, ...]:
    """`collect_docstrings`, cached; a tuple so no caller can change the cached value."""
    seen: set[str] = set()
    found: list[Docstring] = []
    for path in _source_files(root):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for docstring in _file_docstrings(path, module):
            if docstring.text not in seen:
                seen.add(docstring.text)
                found.append(docstring)
    return tuple(found)


def _source_files(root: Path) -> list[Path]:
    """The .py files to read under `root`, sorted by their path relative to `root`."""
    found = []
    for folder, dirs, files in os.walk(root):
        top = folder == str(root)
        dirs[:] = [d for d in dirs if d.isidentifier() and d not in _SKIP_DIRS
                   and not (top and d in _SKIP_PACKAGES)]
        found += [Path(folder, f) for f in files
                  if f.endswith(".py") and f[:-3].isidentifier() and not (top and f[:-3] in _SKIP_PACKAGES)]
    found = [p for p in found if p.relative_to(root) != _TOPICS_FILE]  # data, read by `reference_topics`
    return sorted(found, key=lambda p: p.relative_to(root).parts)


def _file_docstrings(path: Path, module: str) -> Iterator[Docstring]:
    """The kept docstrings of one file, in source order; none if it does not decode or parse."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, UnicodeDecodeError, OSError):
        return
    package = module.split(".")[0]
    for kind, name, node in _documented_nodes(tree, module):
        raw = ast.get_docstring(node, clean=False)
        if raw is None:
            continue
        text = "\n\n".join(paragraphs(inspect.cleandoc(raw)))
        if len(text.split()) >= _MIN_WORDS and _is_utf8(text):
            yield Docstring(module, package, kind, name, text)


def _documented_nodes(tree: ast.Module, module: str) -> Iterator[tuple[str, str, ast.AST]]:
    """(kind, qualified name, node) for the module and every class and function in it, in source order."""
    yield "module", module, tree
    yield from _definitions(tree, prefix="")


def _definitions(node: ast.AST, prefix: str) -> Iterator[tuple[str, str, ast.AST]]:
    """(kind, qualified name, node) of the classes and functions under `node`, nested ones included."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            kind = "class"
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            kind = "function"
        else:  # `if sys.platform == ...:` and `try:` blocks hold definitions too
            yield from _definitions(child, prefix)
            continue
        yield kind, prefix + child.name, child
        yield from _definitions(child, f"{prefix}{child.name}.")


def _is_utf8(text: str) -> bool:
    """False for text with lone surrogates ("\\udc80" escapes), which cannot be written as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def reference_topics(root: str | os.PathLike | None = None) -> dict[str, str]:
    """The language reference topics of `pydoc_data/topics.py` (topic -> text), sorted by topic.

    The file is plain data (`topics = {...}`), read with `ast.literal_eval`, not imported.
    Returns {} when the file is missing or holds no such dict.
    """
    path = Path(root if root is not None else stdlib_root()) / _TOPICS_FILE
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, UnicodeDecodeError, OSError):
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "topics" for t in node.targets):
            try:
                topics = ast.literal_eval(node.value)
            except (ValueError, TypeError):  # not a literal, or an unhashable key
                return {}
            if isinstance(topics, dict):
                return {k: v for k, v in sorted(topics.items()) if isinstance(k, str) and isinstance(v, str)}
    return {}


def docstring_task(
    seed: int = 0,
    dev_fraction: float = 0.35,
    max_train_per_label: int | None = 100,
    root: str | os.PathLike | None = None,
) -> DocTask:
    """The labelled task: classify a docstring by the part of the standard library it is from.

    For each label (`LABEL_PACKAGES`) the modules are shuffled with the seed and walked in that
    order; a module goes to dev when adding its docstrings brings dev closer to `dev_fraction`
    of the label's docstrings (so every label has modules on both sides). Then, if
    `max_train_per_label` is set, a seeded sample of that many train docstrings per label is
    kept: 100 makes a small, balanced training set, the regime where pre-training helps most,
    and keeps fine-tuning quick. Labels whose packages have fewer than `_MIN_LABEL_DOCSTRINGS`
    docstrings here (a stripped-down standard library) are left out.

    Args:
        seed: chooses the split and the train sample; the same seed gives the same task on
            the same Python version.
        dev_fraction: the share of each label's docstrings to hold out, in (0, 0.5].
        max_train_per_label: at most this many train examples per label; None keeps all.
        root: the standard library folder; default `stdlib_root()`.

    Returns:
        The task; `train` is shuffled (seeded), `dev` is in collection order.

    Raises:
        UserError: a bad argument, or fewer than two labels found.
    """
    if not 0 < dev_fraction <= 0.5:
        raise UserError(f"dev_fraction must be in (0, 0.5], got {dev_fraction}")
    if max_train_per_label is not None and max_train_per_label < 1:
        raise UserError(f"max_train_per_label must be at least 1 or None, got {max_train_per_label}")
    by_label = _label_docstrings(collect_docstrings(root))
    if len(by_label) < 2:
        where = root if root is not None else stdlib_root()
        raise UserError(f"{where}: found docstrings for fewer than two of the standard-library packages "
                        f"{', '.join(p for ps in LABEL_PACKAGES.values() for p in ps)}")
    train: list[tuple[str, str]] = []
    dev: list[tuple[str, str]] = []
    dev_modules: set[str] = set()
    for label, docstrings in by_label.items():
        rng = random.Random(f"{seed}/{label}")  # per label, so one missing label leaves the others' splits alone
        held_out = _held_out_modules(Counter(d.module for d in docstrings), dev_fraction, rng)
        dev_modules |= held_out
        dev += [(_one_line(d.text), label) for d in docstrings if d.module in held_out]
        kept = [d for d in docstrings if d.module not in held_out]
        if max_train_per_label is not None and len(kept) > max_train_per_label:
            kept = [kept[i] for i in sorted(rng.sample(range(len(kept)), max_train_per_label))]
        train += [(_one_line(d.text), label) for d in kept]
    random.Random(seed).shuffle(train)  # mixed labels, for a loader that does not shuffle
    return DocTask(train, dev, tuple(by_label), frozenset(dev_modules))


def _label_docstrings(docstrings: list[Docstring]) -> dict[str, list[Docstring]]:
    """The docstrings of each label with enough of them, labels in `LABEL_PACKAGES` order."""
    label_of = {package: label for label, packages in LABEL_PACKAGES.items() for package in packages}
    by_label: dict[str, list[Docstring]] = defaultdict(list)
    for docstring in docstrings:
        if docstring.package in label_of:
            by_label[label_of[docstring.package]].append(docstring)
    return {label: by_label[label] for label in LABEL_PACKAGES
            if len(by_label[label]) >= _MIN_LABEL_DOCSTRINGS and len({d.module for d in by_label[label]}) >= 2}


def _held_out_modules(counts: Counter, dev_fraction: float, rng: random.Random) -> set[str]:
    """Modules whose docstrings add up to about `dev_fraction` of the total; never all, never none.

    A module is taken when it brings the held-out count closer to the target, so the count
    stays below twice the target (at most the total, as dev_fraction <= 0.5), and of two or
    more modules the first one below twice the target is always taken.
    """
    modules = sorted(counts)
    rng.shuffle(modules)
    target = dev_fraction * sum(counts.values())
    held_out: set[str] = set()
    held = 0
    for module in modules:
        if abs(held + counts[module] - target) < abs(held - target):
            held_out.add(module)
            held += counts[module]
    return held_out


def _one_line(text: str) -> str:
    """A docstring's paragraphs joined by spaces: one line, as a classifier's input."""
    return text.replace("\n\n", " ")


def write_pretraining_corpus(
    out_dir: str | os.PathLike,
    exclude_modules: frozenset[str] | set[str] = frozenset(),
    root: str | os.PathLike | None = None,
) -> list[Path]:
    """Write the unlabeled pre-training text in the "lines" format; return the files.

    Two UTF-8 files, one paragraph per line and a blank line after each document:
    `stdlib_docstrings.txt` (each docstring a document, except those of `exclude_modules`,
    pass `DocTask.dev_modules` so the dev text is never seen) and `python_reference.txt`
    (each reference topic a document; left out if `pydoc_data` is missing). Text is cleaned
    as in `paragraphs`. A file that already holds the same text is not rewritten, so its
    modification time, and the tokenized-corpus cache keyed on it, survive a second run.

    Args:
        out_dir: the folder to write into (created if needed).
        exclude_modules: dotted names of modules whose docstrings to leave out.
        root: the standard library folder; default `stdlib_root()`.

    Returns:
        The paths written, in a fixed order.

    Raises:
        UserError: no docstrings found (no standard library at `root`).
    """
    docstrings = [d.text for d in collect_docstrings(root) if d.module not in exclude_modules]
    if not docstrings:
        raise UserError(f"{root if root is not None else stdlib_root()}: no standard-library docstrings found "
                        "(looked for .py files)")
    documents = {
        "stdlib_docstrings.txt": [text.split("\n\n") for text in docstrings],
        "python_reference.txt": [p for p in map(paragraphs, reference_topics(root).values()) if p],
    }
    written = []
    for name, docs in documents.items():
        if docs:
            path = Path(out_dir) / name
            _write_if_changed(path, "".join("\n".join(doc) + "\n\n" for doc in docs))
            written.append(path)
    return written


def _write_if_changed(path: Path, text: str) -> None:
    """Write `text` to `path` atomically, unless the file already holds exactly that."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass  # missing or unreadable: write it
    write_text_atomic(path, text)
