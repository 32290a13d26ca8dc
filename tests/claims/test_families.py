"""The summary table (every family on the same tasks): its cells, n/a with reasons, and end to end at --quick scale."""

import math

import pytest

from bertology.claims.experiment import Experiment
from bertology.claims.families import (
    ALBERT,
    BERT,
    CLAIM_3_ROWS,
    COLUMNS,
    COVE_ROW,
    DISTILLED,
    ELECTRA,
    ELMO_ROW,
    FAMILIES,
    GPT,
    ROBERTA,
    STATIC,
    T5,
    ULMFIT,
    WIC,
    XLNET,
    NotApplicable,
    Probe,
    refusal,
    table_cells,
)
from bertology.claims.pretraining_task import equal_time, steps_within

SQUAD = ("squad/train-v2.0.subset-first10articles.json", "squad/dev-v2.0.subset-Normans-Rhine.json",
         "squad/dev-v2.0.subset-Normans-Computational_complexity_theory.json")
SQUAD_F1, CONLL_F1 = "SQuAD subset F1", "CoNLL-2003 F1"
# Where the package refuses: feature heads and distillation take no span task, an AWD-LSTM classifier
# no token or span task.
REFUSED = {(STATIC, SQUAD_F1), (COVE_ROW, SQUAD_F1), (ELMO_ROW, SQUAD_F1), (ULMFIT, CONLL_F1), (ULMFIT, SQUAD_F1),
           (DISTILLED, SQUAD_F1)}
# The WiC probe reads these families' layers; the others' (ULMFiT's AWD-LSTM, GPT, XLNet, T5) it may refuse
WIC_READS = (STATIC, COVE_ROW, ELMO_ROW, BERT, ROBERTA, ALBERT, ELECTRA, DISTILLED)


def test_cells_show_seeds_probes_and_numbered_not_applicable():
    cells = {"static": {"SST-2": [0.5, 0.6], "SQuAD": NotApplicable("spans need positions"),
                        "WiC": Probe(0.5531, "static")},
             "GPT": {"SST-2": [0.7], "SQuAD": [0.2], "WiC": NotApplicable("a gpt model")}}
    shown, footnotes = table_cells(cells)
    assert shown["static"] == {"SST-2": [0.5, 0.6], "SQuAD": "n/a [1]", "WiC": "0.553 (static)"}
    assert shown["GPT"] == {"SST-2": [0.7], "SQuAD": [0.2], "WiC": "n/a [2]"}
    assert footnotes == ["[1] static, SQuAD: spans need positions", "[2] GPT, WiC: a gpt model"]
    assert table_cells({"BERT": {"SST-2": [0.8]}}) == ({"BERT": {"SST-2": [0.8]}}, [])


def test_a_refusal_is_one_line_without_the_model_folder():
    assert refusal("/cache/claims/pretrained-ab12: an AWD-LSTM is fine-tuned here as ULMFiT's classifier\nmore") == \
        "an AWD-LSTM is fine-tuned here as ULMFiT's classifier"
    assert refusal("squad: static vectors give features for sentence, pair and token tasks") == \
        "squad: static vectors give features for sentence, pair and token tasks"
    assert refusal("--head-bilstm: no") == "--head-bilstm: no" and refusal("") == "refused"


@pytest.mark.slow
def test_families_quick(run_quick, data_dir, claims_cache, tmp_path):
    results, out = run_quick("families", "glue/SST-2", "glue/MRPC", "glue/STS-B", "conll2003", "wic", "multi30k",
                             *SQUAD)
    rows = {row["family"]: row for row in results["rows"]}
    assert list(rows) == list(FAMILIES) and len(rows) == 12
    assert results["columns"][3:] == [*COLUMNS, WIC] and len(results["columns"][3:]) == 6
    text = (out / "results.md").read_text()
    for family, row in rows.items():
        for column in COLUMNS:
            cell = row["cells"][column]
            if (family, column) in REFUSED:
                assert cell["reason"] and row[column].startswith("n/a ["), (family, column, cell)
                assert f"{row[column].removeprefix('n/a ')} {family}, {column}: {cell['reason']}" in results["notes"]
            else:
                assert isinstance(cell, list) and len(cell) == 2, (family, column, cell)  # one value per seed
                assert all(math.isfinite(v) and -1 <= v <= 1 for v in cell)  # accuracies, F1s and correlations
        wic = row["cells"][WIC]
        if "reason" in wic:
            assert family not in WIC_READS and wic["reason"] and row[WIC].startswith("n/a [")
        else:
            assert 0.3 < wic["accuracy"] < 0.8 and row[WIC] == f"{wic['accuracy']:.3f} ({wic['layer']})"
    assert rows[DISTILLED]["minutes (actual)"] is None
    assert all(row["minutes (actual)"] >= 0 for family, row in rows.items() if family != DISTILLED)
    assert "| static (word2vec) |" in text and "n/a [1]" in text
    assert (out / "families.png").stat().st_size > 10_000
    # the teacher of the distilled student is the BERT row's first seed, fine-tuned on the task
    assert (out / "runs" / "distilled-student-sst2" / "seed-1" / "eval_results.json").exists()
    # claim 3's models: asked for as claim 3 asks, every one is already in the cache (nothing is timed or trained)
    logged = []
    experiment = Experiment(tmp_path / "claim-3", data_dir.root, True, [0, 1], claims_cache, log=logged.append)
    settings, seconds, budget = equal_time(experiment)
    for family, row in CLAIM_3_ROWS.items():
        folder = experiment.pretrained(**{**settings[row], "max_steps": steps_within(budget, seconds[row])})
        assert rows[family]["model"] == str(folder)
    assert logged and all("from the cache" in line for line in logged)
    assert {GPT, XLNET, T5} <= set(CLAIM_3_ROWS)
