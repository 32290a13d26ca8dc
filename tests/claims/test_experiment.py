"""The claims' shared steps: verdicts, tables, the content-keyed pre-training cache, the registry and
`bertology reproduce`'s errors."""

import json
import shutil

import pytest

from bertology.claims import CLAIMS, Claim, claim_list, find_claim
from bertology.claims.experiment import (
    QUICK_EXAMPLES,
    Experiment,
    ReproduceConfig,
    cell,
    markdown,
    pretraining_key,
    rows_beside,
    verdict,
)
from bertology.cli import main
from bertology.data.corpus import read_documents
from bertology.data.tokenizer import Tokenizer
from bertology.errors import UserError


def test_verdict_needs_every_seed_apart():
    assert verdict("a beats b", "a", [0.8, 0.82, 0.85], "b", [0.7, 0.75, 0.79], "accuracy").outcome == "reproduced"
    assert verdict("a beats b", "a", [0.6, 0.62], "b", [0.7, 0.75], "accuracy").outcome == "not reproduced"
    overlapping = verdict("a beats b", "a", [0.8, 0.7, 0.9], "b", [0.75, 0.76, 0.74], "accuracy")
    assert overlapping.outcome == "inconclusive (within seed range)"
    assert overlapping.margin == pytest.approx(0.8 - 0.75)


def test_cells_show_the_median_and_the_range():
    assert cell([0.5, 0.7, 0.6]) == "0.600 (0.500-0.700)"
    assert cell([0.25]) == "0.250"
    assert cell("ULMFiT") == "ULMFiT"


def test_markdown_has_the_table_verdicts_scale_and_machine():
    results = {"title": "Claim X", "paper": "P", "scale": "S", "columns": ["model", "acc"], "seeds": [0, 1, 2],
               "rows": [{"model": "m", "acc": [0.1, 0.2, 0.3]}], "quick": False, "minutes": 3.5, "notes": ["n"],
               "verdicts": [vars(verdict("m beats z", "m", [0.3], "z", [0.1], "acc"))], "plots": ["/x/p.png"],
               "machine": {"cpus": 2, "processor": "cpu", "torch": "2", "torch_threads": 2, "date": "d"}}
    text = markdown(results)
    assert "| m | 0.200 (0.100-0.300) |" in text
    assert "m beats z: **reproduced**" in text and "+0.200" in text
    assert "Ran in 3.5 minutes on 2 CPU cores" in text and "![p](p.png)" in text


def test_pretraining_key_follows_content_not_paths(tmp_path):
    corpus = tmp_path / "a" / "corpus.txt"
    corpus.parent.mkdir()
    corpus.write_text("one sentence.\n\nanother one.\n")
    moved = tmp_path / "b" / "elsewhere.txt"
    moved.parent.mkdir()
    shutil.copy(corpus, moved)
    key = pretraining_key({"corpus": [str(corpus)], "preset": "tiny", "max_steps": 10})
    assert key == pretraining_key({"corpus": [str(moved)], "preset": "tiny", "max_steps": 10})
    assert key == pretraining_key({"corpus": [str(corpus.parent)], "preset": "tiny", "max_steps": 10})
    assert key != pretraining_key({"corpus": [str(corpus)], "preset": "tiny", "max_steps": 11})
    moved.write_text("one sentence.\n\nanother one!\n")
    assert key != pretraining_key({"corpus": [str(moved)], "preset": "tiny", "max_steps": 10})
    # a renamed setting (--seq-len is now --max-seq-len) keeps the cached models' keys
    assert pretraining_key({"corpus": [str(corpus)], "max_seq_len": 64}) == \
        pretraining_key({"corpus": [str(corpus)], "seq_len": 64})


def test_registry_lists_the_eleven_claims_then_the_summary_and_why_some_cannot_run():
    assert [c.number for c in CLAIMS] == list(range(1, 13))  # the eleven claims, then the summary table
    assert CLAIMS[-1].name == "families"
    text = claim_list()
    assert len(text.splitlines()) == 12
    for claim in CLAIMS:
        assert claim.name in text
        assert (claim.module is None) == (claim.unavailable is not None)
    assert find_claim("2") is find_claim("label-needs")
    with pytest.raises(UserError, match="unknown claim 'nope'; choose one of contextual-vs-static"):
        find_claim("nope")


def test_reproduce_command_errors_are_one_line(tmp_path, capsys, monkeypatch):
    assert main(["reproduce", "--list"]) == 0
    assert "label-needs" in capsys.readouterr().out
    assert main(["reproduce", "--out", str(tmp_path / "x")]) == 2
    assert "name a claim" in capsys.readouterr().err
    assert main(["reproduce", "label-needs"]) == 2
    assert "--out DIR is required" in capsys.readouterr().err
    unwritten = Claim(13, "unwritten", "a claim whose model is not built", None, "no such model yet")
    monkeypatch.setattr("bertology.claims.CLAIMS", [*CLAIMS, unwritten])
    assert "[unavailable: no such model yet]" in claim_list()
    assert main(["reproduce", "unwritten", "--out", str(tmp_path / "y")]) == 2
    assert "claim unwritten is unavailable: no such model yet" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()
    assert main(["reproduce", "label-needs", "--quick", "--data", str(tmp_path / "nothing"),
                 "--out", str(tmp_path / "z"), "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nothing/glue/SST-2: not found" in err


def test_finished_finetuning_runs_are_read_back(tmp_path, tiny_model, keyword_task):
    experiment = Experiment(tmp_path / "claim", tmp_path, quick=True, seeds=[0, 1], cache=tmp_path / "cache",
                            log=lambda _: None)
    settings = dict(model=str(tiny_model), task="classification", train_file=str(keyword_task / "train.csv"),
                    dev_file=str(keyword_task / "dev.csv"), epochs=1, lr=1e-3, precision="fp32")
    first = experiment.finetuned("keyword", **settings)
    assert [run["seed"] for run in first["runs"]] == [0, 1]
    seed_folder = tmp_path / "claim" / "runs" / "keyword" / "seed-1"
    # --quick skips the per-run learning curves (about half of a quick claim's time went to drawing them)
    assert (seed_folder / "eval_results.json").is_file() and not (seed_folder / "learning_curve.png").exists()
    results = tmp_path / "claim" / "runs" / "keyword" / "claim_runs.json"
    stamp = results.stat().st_mtime_ns
    assert experiment.finetuned("keyword", **settings) == json.loads(results.read_text())
    assert results.stat().st_mtime_ns == stamp  # read back, not run again


def test_reproduce_config_defaults_to_three_seeds(tmp_path):
    experiment = Experiment.from_config(ReproduceConfig(claim="label-needs", out=str(tmp_path / "o")))
    assert experiment.seeds == [0, 1, 2]
    assert Experiment.from_config(ReproduceConfig(claim="2", out=str(tmp_path / "q"), quick=True)).seeds == [0, 1]


def test_quick_task_data_keeps_the_files_formats(tmp_path):
    source = tmp_path / "data" / "task"
    source.mkdir(parents=True)
    (source / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"s{i}\t{i % 2}\n" for i in range(500)))
    (source / "train.txt").write_text("-DOCSTART- -X- O\n\n" + "".join(f"w{i} B-PER\nx O\n\n" for i in range(500)))
    experiment = Experiment(tmp_path / "claim", tmp_path / "data", quick=True, seeds=[0], cache=tmp_path / "cache")
    quick = experiment.task_data("task")
    assert quick != source and (quick / "train.tsv").read_text().splitlines()[:2] == ["sentence\tlabel", "s0\t0"]
    assert len((quick / "train.tsv").read_text().splitlines()) == QUICK_EXAMPLES + 1  # the header and the rows
    assert (quick / "train.txt").read_text().count("B-PER") == QUICK_EXAMPLES
    assert Experiment(tmp_path / "c2", tmp_path / "data", quick=False, seeds=[0], cache=tmp_path / "cache"
                      ).task_data("task") == source


def test_a_reports_dev_set_size_is_the_one_the_run_read(tmp_path):
    source = tmp_path / "data" / "glue" / "SST-2"
    source.mkdir(parents=True)
    for split in ("train", "dev"):
        (source / f"{split}.tsv").write_text("sentence\tlabel\n" + "".join(f"s{i}\t{i % 2}\n" for i in range(300)))
    quick = Experiment(tmp_path / "claim", tmp_path / "data", quick=True, seeds=[0], cache=tmp_path / "cache")
    full = Experiment(tmp_path / "c2", tmp_path / "data", quick=False, seeds=[0], cache=tmp_path / "cache")
    assert quick.dev_examples("glue/SST-2", "sst2") == QUICK_EXAMPLES and full.dev_examples("glue/SST-2", "sst2") == 300


def test_corpus_slice_is_the_first_whole_wikitext_articles_up_to_a_token_count(tmp_path, data_dir, minilm_dir):
    data_dir / "wikitext-2-raw/wiki.valid.raw"  # skips the test when the data set is absent
    experiment = Experiment(tmp_path / "claim", data_dir.root, quick=False, seeds=[0], cache=tmp_path / "cache")
    tokenizer = Tokenizer.from_pretrained(minilm_dir)
    articles = list(read_documents([data_dir.root / "wikitext-2-raw/wiki.valid.raw"]))
    sizes = [sum(len(tokenizer.encode(s, add_special_tokens=False)) for s in article) for article in articles[:10]]
    target = sum(sizes[:5]) + sizes[5] // 2  # five whole articles and half the sixth
    path = experiment.corpus_slice(target)
    assert list(read_documents([path], doc_format="lines")) == articles[:5]
    assert experiment.corpus_slice(target) == path  # the same content, the same file
    assert list(read_documents([experiment.corpus_slice(10)], doc_format="lines")) == articles[:2]  # one held out


def test_a_recipe_reaches_every_bert_pretraining_and_keys_it_apart(tmp_path, monkeypatch):
    experiment = Experiment.from_config(ReproduceConfig(claim="3", out=str(tmp_path / "o"), recipe="cramming"))
    assert experiment.with_recipe({"objective": "roberta"}) == {"objective": "roberta", "recipe": "cramming"}
    assert experiment.with_recipe({"arch": "gpt"}) == {"arch": "gpt"}  # the recipe is the bert family's
    seen = []
    monkeypatch.setattr(Experiment, "cached", lambda self, kind, key, settings, train: seen.append((key, settings)))
    experiment.pretrained(objective="roberta", max_steps=5)
    Experiment.from_config(ReproduceConfig(claim="3", out=str(tmp_path / "p"))).pretrained(objective="roberta",
                                                                                          max_steps=5)
    (with_key, with_settings), (without_key, without_settings) = seen
    assert with_settings["recipe"] == "cramming" and "recipe" not in without_settings
    assert with_key != without_key


def claim_results(claim: str, rows: list[dict], verdicts: list[str], notes: list[str], date: str) -> dict:
    """A claim's results.json as Experiment.report writes it (one column of seeds' numbers)."""
    return {"claim": claim, "title": "Claim 2", "quick": False, "seeds": [0, 1], "minutes": 12.5,
            "machine": {"date": date, "cpus": 2, "processor": "x86_64", "torch": "2.13.0", "torch_threads": 1},
            "scale": "mini BERT", "paper": "BERT", "columns": ["model", "100 labels"], "rows": rows,
            "verdicts": [{"statement": s, "outcome": "reproduced", "metric": "accuracy", "better": "a", "worse": "b",
                          "margin": 0.1} for s in verdicts], "plots": ["label_needs.png"], "notes": notes}


def test_a_recipe_run_is_shown_beside_the_run_without_it():
    base = claim_results("label-needs", [{"model": "BERT, pre-trained here", "100 labels": [0.55, 0.57]},
                                         {"model": "ULMFiT", "100 labels": [0.60, 0.61]},
                                         {"model": "BERT, random weights", "100 labels": [0.52, 0.53]}],
                         ["pre-trained beats random"], ["the corpus is WikiText-2"], "2026-11-26")
    recipe = claim_results("label-needs", [{"model": "BERT, pre-trained here", "100 labels": [0.62, 0.64]},
                                           {"model": "ULMFiT", "100 labels": [0.60, 0.61]},  # not a BERT: unchanged
                                           {"model": "BERT, random weights", "100 labels": [0.51, 0.53]}],
                           ["pre-trained beats random"], ["the corpus is WikiText-2", "pre-trained by the recipe"],
                           "2026-11-29")
    shown = rows_beside(base, recipe, "--recipe cramming")
    assert [row["model"] for row in shown["rows"]] == [
        "BERT, pre-trained here", "BERT, pre-trained here, --recipe cramming", "ULMFiT", "BERT, random weights",
        "BERT, random weights, --recipe cramming"]
    assert shown["rows"][1]["100 labels"] == [0.62, 0.64] and shown["rows"][0]["100 labels"] == [0.55, 0.57]
    assert [v["statement"] for v in shown["verdicts"]] == ["pre-trained beats random",
                                                          "--recipe cramming: pre-trained beats random"]
    assert shown["notes"][:2] == ["the corpus is WikiText-2", "pre-trained by the recipe"]
    assert "2026-11-29" in shown["notes"][-1] and shown["machine"]["date"] == "2026-11-26"
    page = markdown(shown)
    assert "| BERT, pre-trained here, --recipe cramming | 0.630 (0.620-0.640) |" in page
    with pytest.raises(UserError, match="the columns differ"):
        rows_beside(base, {**recipe, "columns": ["model", "300 labels"]}, "--recipe cramming")


def test_beside_is_checked_before_the_claim_runs(tmp_path, capsys):
    base = tmp_path / "label-needs.json"
    base.write_text(json.dumps(claim_results("label-needs", [], [], [], "2026-11-26")))
    out = str(tmp_path / "o")
    cases = [(["label-needs", "--beside", str(base)], "give --recipe too"),
             (["label-needs", "--recipe", "cramming", "--beside", str(tmp_path / "absent.json")],
              "absent.json: not a readable results.json"),
             (["model-size", "--recipe", "cramming", "--beside", str(base)],
              "holds claim label-needs's results, not claim model-size's")]
    for flags, message in cases:
        assert main(["reproduce", *flags, "--out", out]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # refused before anything was made
