"""The documentation site's results pages: each is written by the bench script that measures it,
every table a page shows from one exists, and writing a section changes that section alone.
(`mkdocs build --strict` in .ci/run checks the links and the navigation.)"""

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
RESULTS = DOCS / "results"
sys.path.insert(0, str(REPO / "bench"))
import results_page  # noqa: E402  (bench/'s helper: the benches run as scripts, it is not in the package)

INCLUDE = re.compile(r'^--8<-- "docs/results/([-\w]+)\.md:([-\w]+)"$', flags=re.M)
PAGES = sorted(path for path in RESULTS.glob("*.md") if path.name != "index.md")


def sections(page: Path) -> list[str]:
    return re.findall(r"<!-- --8<-- \[start:([-\w]+)\] -->", page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", PAGES, ids=[page.stem for page in PAGES])
def test_each_results_page_is_written_by_the_script_it_names(page):
    text = page.read_text(encoding="utf-8")
    script = re.search(r"Written by `(bench/\w+\.py)`", text)
    assert script, f"{page.name} does not say which bench script writes it"
    source = (REPO / script.group(1)).read_text(encoding="utf-8")
    assert f'write_section("{page.stem}"' in source, f"{script.group(1)} does not write {page.name}"
    assert sections(page), f"{page.name} has no measured section"
    ends = re.findall(r"<!-- --8<-- \[end:([-\w]+)\] -->", text)
    assert ends == sections(page), f"{page.name}: every section opens and closes once, in order"


def test_every_bench_script_the_docs_cite_writes_a_results_page():
    cited = {name for path in [REPO / "README.md", *DOCS.rglob("*.md")]
             for name in re.findall(r"bench/(\w+)\.py", path.read_text(encoding="utf-8"))}
    assert len(cited) >= 15
    for name in sorted(cited - {"results_page"}):
        source = (REPO / "bench" / f"{name}.py").read_text(encoding="utf-8")
        assert "write_section(" in source, f"bench/{name}.py is cited but writes no results page"


def test_every_table_a_page_shows_is_in_its_results_page():
    for path in DOCS.rglob("*.md"):
        for page, section in INCLUDE.findall(path.read_text(encoding="utf-8")):
            assert section in sections(RESULTS / f"{page}.md"), f"{path.relative_to(REPO)}: no section {section} in {page}.md"


def test_writing_a_section_replaces_it_alone_and_stamps_it(tmp_path, monkeypatch):
    monkeypatch.setattr(results_page, "RESULTS", tmp_path)
    monkeypatch.setattr(results_page, "machine", lambda: "a test machine")  # the real one imports torch: seconds
    page = results_page.write_section("speed", "tiny", "Tiny", "| a |\n|---|\n| 1 |", script="bench/speed.py")
    results_page.write_section("speed", "mini", "Mini", "old", provenance="*Moved here.*")
    results_page.write_section("speed", "tiny", "Tiny", "| a |\n|---|\n| 2 |")
    text = page.read_text(encoding="utf-8")
    assert sections(page) == ["tiny", "mini"]  # replaced in place, the other kept
    assert "| 2 |" in text and "| 1 |" not in text and "*Moved here.*\n\nold" in text
    assert "Written by `bench/speed.py`" in text
    stamp = re.search(r"\*Measured (\d{4}-\d\d-\d\d \d\d:\d\d UTC) on (.+); commit (\S+).*; `(python .+)`\.\*", text)
    assert stamp, text
    assert not list(tmp_path.glob("*.tmp"))


def test_section_names_are_what_a_snippet_can_name():
    assert results_page.slug("preset", "base", "bf16") == "preset-base-bf16"
    assert results_page.slug("all-MiniLM-L6-v2", "fp32") == "all-minilm-l6-v2-fp32"
    with pytest.raises(ValueError):
        results_page.write_section("speed", "Bad Name", "t", "b")
