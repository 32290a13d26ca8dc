"""`reproduce --model`: the claims that compare against a model pre-trained elsewhere take any model
directory in all-MiniLM-L6-v2's place; a directory they cannot use, or --model given to a claim that
takes none, is a one-line error before any work."""

import json

import pytest
import transformers
from helpers import save_tiny_gpt

from bertology.cli import main
from bertology.claims import CLAIMS
from bertology.claims.experiment import REFERENCE_NEEDS
from bertology.claims.label_needs import QUICK_LABELS


def refused(args: list[str], capsys, tmp_path) -> str:
    """The one line `bertology reproduce ARGS` answers, checked to be a user error (exit 2); --quick
    with no data, so that a refusal missed fails in a second instead of starting the claim."""
    assert main(["reproduce", *args, "--quick", "--data", str(tmp_path / "no-data"),
                 "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_model_is_refused_where_it_cannot_be_used(tmp_path, capsys):
    out = tmp_path / "out"
    not_a_model = tmp_path / "notes"
    not_a_model.mkdir()
    err = refused(["label-needs", "--model", str(not_a_model), "--out", str(out)], capsys, tmp_path)
    assert err.startswith(f"bertology: error: --model {not_a_model}: ") and "config.json" in err
    err = refused(["albert", "--model", str(not_a_model), "--out", str(out)], capsys, tmp_path)
    assert "claim albert compares against no model pre-trained elsewhere; leave --model out" in err
    assert not out.exists()  # refused before any work


@pytest.mark.slow  # the installed models are searched for a name, the GPT's vocabulary is trained
def test_a_missing_model_or_a_family_the_claim_cannot_use_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    err = refused(["label-needs", "--model", str(tmp_path / "missing"), "--out", str(out)], capsys, tmp_path)
    assert f"--model {tmp_path / 'missing'}: " in err and "no installed package ships a model of that name" in err
    gpt = save_tiny_gpt(tmp_path / "gpt")  # fine-tuned whole only: no feature-based heads, no students
    err = refused(["contextual-vs-static", "--model", str(gpt), "--out", str(out)], capsys, tmp_path)
    assert f"--model {gpt}: claim contextual-vs-static trains heads on its frozen layers' features" in err
    err = refused(["distillation", "--model", str(gpt), "--out", str(out)], capsys, tmp_path)
    assert "claim distillation distils a student from it, which a gpt model cannot do here" in err
    for name in ("vocab.txt", "tokenizer.json"):
        (gpt / name).unlink()
    err = refused(["label-needs", "--model", str(gpt), "--out", str(out)], capsys, tmp_path)
    assert err.startswith(f"bertology: error: --model {gpt}: ") and "vocab" in err
    assert not out.exists()


def test_list_marks_the_claims_that_take_a_model(capsys):
    assert main(["reproduce", "--list"]) == 0
    marked = [line.split()[1] for line in capsys.readouterr().out.splitlines() if "[takes --model]" in line]
    assert marked == [claim.name for claim in CLAIMS if claim.model_needs]
    assert marked == ["contextual-vs-static", "label-needs", "features-vs-finetuning", "distillation"]
    assert {need for claim in CLAIMS for need in claim.model_needs} <= set(REFERENCE_NEEDS)


@pytest.mark.slow  # finding the installed MiniLM to compare with takes a second
def test_a_folder_keeps_the_model_its_runs_were_made_with(tmp_path, capsys, tiny_model):
    out = tmp_path / "out"
    (out / "runs" / "all-minilm-l6-v2-20").mkdir(parents=True)  # a run made before --model: MiniLM's
    err = refused(["label-needs", "--model", str(tiny_model), "--out", str(out)], capsys, tmp_path)
    assert "holds the runs of another model (all-MiniLM-L6-v2); choose another --out" in err


@pytest.fixture
def transformers_bert(transformers_tokenizers, tmp_path):
    """A tiny BERT with random weights as transformers writes it (its own WordPiece vocabulary)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(transformers_tokenizers["bert"][1])
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=48, max_position_embeddings=128,
                                     pad_token_id=tokenizer.pad_token_id)
    directory = tmp_path / "tiny-transformers-bert"
    transformers.BertForMaskedLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.mark.slow
def test_label_needs_runs_the_model_given(run_quick, transformers_bert):
    results, out = run_quick("label-needs", "glue/SST-2", model=str(transformers_bert))
    assert [row["model"] for row in results["rows"]] == ["BERT, random weights", "ULMFiT (AWD-LSTM, 3 stages)",
                                                         "BERT, pre-trained here", "tiny-transformers-bert"]
    assert "Pre-trained elsewhere: tiny-transformers-bert (--model: " in results["scale"]
    assert "all-MiniLM-L6-v2" not in json.dumps(results["rows"])
    for count in QUICK_LABELS:  # each seed fine-tuned the given model: its width, its vocabulary
        for seed in (0, 1):
            run = out / "runs" / f"tiny-transformers-bert-{count}" / f"seed-{seed}"
            config = json.loads((run / "config.json").read_text())
            assert (config["hidden_size"], config["vocab_size"]) == (32, 1000)
    assert json.loads((out / "reference_model.json").read_text()) == {"model": str(transformers_bert.resolve())}
