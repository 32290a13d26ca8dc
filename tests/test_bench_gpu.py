"""bench/gpu.py, the GPU measurement of issue 36, runs end to end with --smoke (tiny sizes) on
whatever device this machine has, so that a later GPU session finds it working: every section
writes its table, and no section fails. The numbers of a smoke run measure nothing."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wikitext_corpus

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_every_section_of_the_gpu_bench_runs_at_smoke_size(data_dir, tmp_path):
    corpus = wikitext_corpus(data_dir, tmp_path, 60_000) / "wiki.txt"
    results = tmp_path / "gpu.md"
    run = subprocess.run([sys.executable, REPO / "bench" / "gpu.py", "--smoke", "--corpus", corpus, "--results",
                          results, "--families", "bert:bert", "gpt", "--budget", "100000"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    page = results.read_text(encoding="utf-8")
    sections = ["peak", "pretrain_step", "profile", "inference", "embed", "generation", "pretrain_cli", "families", "compile"]
    assert [line.split("[start:")[1].split("]")[0] for line in page.splitlines() if "[start:" in line] == sections
    assert "FAILED" not in page and "skipped" not in page and "not run" not in page, page
    assert page.count("; commit ") == len(sections) and page.count("transformers ") >= len(sections)
    assert "| bert | bert | ok" in page and "| gpt | clm | ok" in page and "| True |" in page
