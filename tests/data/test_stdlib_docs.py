"""The standard-library documentation data: docstrings, the labelled task and the pre-training corpus."""

import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from bertology.data.stdlib_docs import (
    LABEL_PACKAGES,
    collect_docstrings,
    docstring_task,
    paragraphs,
    reference_topics,
    write_pretraining_corpus,
)
from bertology.errors import UserError


@pytest.mark.slow
def test_collection_finds_thousands_of_clean_unique_docstrings():
    docstrings = collect_docstrings()
    assert len(docstrings) > 3000
    assert {d.kind for d in docstrings} == {"module", "class", "function"}
    assert all(len(d.text.split()) >= 5 for d in docstrings)
    assert len({d.text for d in docstrings}) == len(docstrings)
    assert not any(d.package in {"tkinter", "idlelib", "test"} for d in docstrings)
    assert not any(p.startswith(">>>") for d in docstrings for p in d.text.split("\n\n"))
    future = next(d for d in docstrings if d.module == "asyncio.futures" and d.name == "Future.cancel")
    assert (future.package, future.kind) == ("asyncio", "function")


@pytest.mark.slow
def test_reference_topics_are_read_as_data():
    topics = reference_topics()
    assert "assert" in topics and len(topics) > 50


def test_paragraphs_join_wrapped_lines_and_drop_doctests_and_rules():
    text = "Add two\nnumbers.\n\nFor example:\n>>> add(1, 2)\n3\n\nTitle\n=====\n| a | b |\nmore  text"
    assert paragraphs(text) == ["Add two numbers.", "For example:", "Title more text"]


@pytest.fixture(scope="module")
def task():
    return docstring_task(seed=0)


@pytest.mark.slow
def test_no_module_is_on_both_sides_and_every_label_is_on_both(task):
    module_of = {d.text.replace("\n\n", " "): d.module for d in collect_docstrings()}  # texts are unique
    train_modules = {module_of[text] for text, _ in task.train}
    dev_modules = {module_of[text] for text, _ in task.dev}
    assert dev_modules == task.dev_modules
    assert not train_modules & dev_modules
    assert task.labels == tuple(LABEL_PACKAGES)
    assert {label for _, label in task.train} == {label for _, label in task.dev} == set(task.labels)


@pytest.mark.slow
def test_split_sizes_follow_the_fraction_and_the_cap(task):
    train, dev = Counter(l for _, l in task.train), Counter(l for _, l in task.dev)
    full = docstring_task(seed=0, max_train_per_label=None)
    full_train = Counter(l for _, l in full.train)
    assert full.dev == task.dev
    for label in task.labels:
        assert train[label] <= 100
        assert 0.2 < dev[label] / (dev[label] + full_train[label]) < 0.5
    assert all("\n" not in text for text, _ in task.train + task.dev)


@pytest.mark.slow
def test_the_task_is_deterministic_for_a_seed(task):
    again = docstring_task(seed=0)
    other = docstring_task(seed=1)
    assert (again.train, again.dev, again.dev_modules) == (task.train, task.dev, task.dev_modules)
    assert other.dev_modules != task.dev_modules


def test_bad_arguments_are_user_errors():
    with pytest.raises(UserError, match="dev_fraction"):
        docstring_task(dev_fraction=0.9)
    with pytest.raises(UserError, match="max_train_per_label"):
        docstring_task(max_train_per_label=0)


@pytest.mark.slow
def test_corpus_leaves_out_the_dev_modules_and_is_in_lines_format(tmp_path, task):
    paths = write_pretraining_corpus(tmp_path, task.dev_modules)
    assert [p.name for p in paths] == ["stdlib_docstrings.txt", "python_reference.txt"]
    text = "".join(p.read_text(encoding="utf-8") for p in paths)
    assert text.endswith("\n\n") and "\n\n\n" not in text  # one blank line between documents
    documents = set(text.split("\n\n"))
    dev_docstrings = [d for d in collect_docstrings() if d.module in task.dev_modules]
    assert dev_docstrings and not any(d.text.replace("\n\n", "\n") in documents for d in dev_docstrings)
    long_ones = [d.text for d in dev_docstrings if len(d.text.split()) > 30][:20]
    assert long_ones and not any(long in text for long in long_ones)
    train_docstring = next(d for d in collect_docstrings() if d.module not in task.dev_modules)
    assert train_docstring.text.replace("\n\n", "\n") in documents


@pytest.mark.slow
def test_corpus_reads_back_as_lines_documents(tmp_path):
    from bertology.data.corpus import detect_format, read_documents

    paths = write_pretraining_corpus(tmp_path)
    assert [detect_format(p) for p in paths] == ["lines", "lines"]
    documents = list(read_documents(paths, doc_format="lines"))
    assert len(documents) == len(collect_docstrings()) + len(reference_topics())


def test_an_unchanged_corpus_file_is_not_rewritten(tmp_path):
    first = write_pretraining_corpus(tmp_path)
    stamps = [p.stat().st_mtime_ns for p in first]
    second = write_pretraining_corpus(tmp_path)
    assert [p.stat().st_mtime_ns for p in second] == stamps


@pytest.fixture
def fake_stdlib(tmp_path):
    """A tiny standard library: two label packages, a test folder, a broken file, a side effect."""
    def write(relative, source):
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")

    for package, topic in [("email", "mail messages and their headers"), ("xml", "markup trees and elements")]:
        for number in range(3):
            write(f"{package}/part{number}.py", "\n".join(
                f'def f{i}():\n    """Handle {topic}, case number {number} {i}."""\n' for i in range(20)))
    write("email/tests/test_x.py", '"""A test module that should never be read."""\n')
    write("site-packages/thing.py", '"""A third-party module that should never be read."""\n')
    write("broken.py", '"""Does not parse at all here."""\ndef (:\n')
    write("sideeffect.py", f'"""Writes a file when imported, which must never happen."""\n'
                           f'open({str(tmp_path / "imported")!r}, "w").close()\n')
    return tmp_path


def test_a_fake_stdlib_is_parsed_not_imported(fake_stdlib):
    docstrings = collect_docstrings(fake_stdlib)
    assert {d.package for d in docstrings} == {"email", "xml", "sideeffect"}
    assert docstrings == sorted(docstrings, key=lambda d: d.module) and docstrings[0].name == "f0"
    assert not (fake_stdlib / "imported").exists()
    task = docstring_task(root=fake_stdlib)
    assert task.labels == ("email", "xml")
    assert len(task.dev_modules) == 2  # one of the three modules of each label
    paths = write_pretraining_corpus(fake_stdlib / "out", task.dev_modules, root=fake_stdlib)
    assert [p.name for p in paths] == ["stdlib_docstrings.txt"]  # no pydoc_data here
    assert paths[0].read_text(encoding="utf-8").count("\n\n") == len(docstrings) - 20 * 2


def test_a_stdlib_without_the_label_packages_is_a_user_error(tmp_path):
    (tmp_path / "lonely.py").write_text('"""The only module of an odd standard library."""\n')
    with pytest.raises(UserError, match="asyncio, email"):
        docstring_task(root=tmp_path)
    with pytest.raises(UserError, match="no standard-library docstrings"):
        write_pretraining_corpus(tmp_path / "out", root=tmp_path / "missing")


def test_the_module_does_not_import_torch():
    code = "import sys, bertology.data.stdlib_docs; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
