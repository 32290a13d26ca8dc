"""Model directories of the nine model types as transformers writes them (the model's save_pretrained
with random weights, the tokenizer's as its own class saves it: conftest.py's `transformers_tokenizers`),
opened as every command opens one (inference/modeldir.py's `open_model_dir`).

On a padded batch of WikiText-2 sentence pairs, bertology's tokenizer gives transformers'
AutoTokenizer's ids, and its model transformers' logits within 1e-4 at every real position; what
bertology writes back (model and tokenizer) loads in transformers' class and AutoTokenizer with no
missing or unexpected key and the same outputs, and loads here again bit for bit; `bertology info`
names the family and the tokenizer. embed, finetune (SST-2, 64 examples) and evaluate take each
directory, and the fine-tuned model loads in transformers with the same logits."""

import json

import pytest
import torch
import transformers
from helpers import TOKENIZER_CLASSES, run_cli

from bertology.inference.modeldir import load_model, open_model_dir

MAX_LENGTH = 40
# model_type -> (transformers' class, the family bertology reads it as, sizes: tiny, and odd where they may be).
MODELS = {
    "bert": ("BertForMaskedLM", "bert",
             dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)),
    "electra": ("ElectraForPreTraining", "electra",
                dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, embedding_size=16)),
    "distilbert": ("DistilBertForMaskedLM", "distilbert", dict(dim=32, n_layers=2, n_heads=4, hidden_dim=48)),
    "albert": ("AlbertForMaskedLM", "albert",
               dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, embedding_size=16)),
    "roberta": ("RobertaForMaskedLM", "roberta",
                dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)),
    "gpt2": ("GPT2LMHeadModel", "gpt", dict(n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    "openai-gpt": ("OpenAIGPTLMHeadModel", "gpt", dict(n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    "t5": ("T5ForConditionalGeneration", "t5", dict(d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4)),
    "xlnet": ("XLNetLMHeadModel", "xlnet", dict(d_model=32, n_layer=2, n_head=4, d_inner=48)),
}
assert set(MODELS) == set(TOKENIZER_CLASSES)
# The models that read token types (segments); transformers 5's ALBERT and XLNet tokenizers return
# them only when asked (their model_input_names leave them out), where bertology's always do.
SEGMENTS = ("bert", "electra", "albert", "xlnet")


@pytest.fixture(scope="module")
def pairs(data_dir) -> tuple[list[str], list[str]]:
    """Eight sentence pairs of WikiText-2 test lines (of different lengths, so that the batch is padded)."""
    lines = [line.strip() for line in (data_dir / "wikitext-2-raw/wiki.test.raw").read_text(encoding="utf-8").split("\n")
             if line.strip() and not line.strip().startswith("=")]
    return ([" ".join(line.split()[:2 + k]) for k, line in enumerate(lines[:8])],
            [" ".join(line.split()[:2 + 3 * k]) for k, line in enumerate(lines[8:16])])


def transformers_directory(model_type: str, tokenizer_dir, directory):
    """A tiny model of `model_type` with every tensor drawn at std 0.2, saved with its tokenizer by transformers."""
    class_name, _, sizes = MODELS[model_type]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    extra = {}
    if model_type in ("bert", "electra", "distilbert", "albert", "roberta"):
        offset = tokenizer.pad_token_id + 1 if model_type == "roberta" else 0  # RoBERTa's positions after its padding id
        extra = dict(max_position_embeddings=64 + offset, pad_token_id=tokenizer.pad_token_id)
    elif model_type == "t5":
        extra = dict(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                     decoder_start_token_id=tokenizer.pad_token_id)
    elif model_type == "gpt2":
        extra = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    config = transformers.AutoConfig.for_model(model_type, vocab_size=len(tokenizer), **sizes, **extra)
    torch.manual_seed(0)
    model = getattr(transformers, class_name)(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def directories(transformers_tokenizers, tmp_path_factory):
    """model_type -> its directory as transformers writes it (`transformers_directory`), built on first use."""
    built = {}

    def build(model_type: str):
        if model_type not in built:
            built[model_type] = transformers_directory(model_type, transformers_tokenizers[model_type][1],
                                                       tmp_path_factory.mktemp(model_type) / "theirs")
        return built[model_type]

    return build


def their_batch(tokenizer, pairs, model_type: str) -> dict:
    """transformers' padded batch of the pairs (GPT-2 padded with its end of text, as bertology pads it)."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer(*pairs, truncation=True, max_length=MAX_LENGTH, padding=len(pairs[0]) > 1, return_tensors="pt",
                     return_token_type_ids=model_type in SEGMENTS)


def logits_of(model, batch: dict, names: list[str], seq2seq: bool) -> torch.Tensor:
    """(B, T, V) logits of the batch's inputs `names` (a T5's decoder reads the same ids shifted right)."""
    inputs = {key: batch[key] for key in names}
    if seq2seq:
        ids = batch["input_ids"]
        inputs["decoder_input_ids"] = torch.cat([torch.zeros_like(ids[:, :1]), ids[:, :-1]], 1)
    with torch.no_grad():
        return model(**inputs).logits


def unpadded(model_type: str) -> bool:
    """The first GPT's tokenizer has no token to pad with: its texts are run one at a time."""
    return model_type == "openai-gpt"


@pytest.mark.slow
@pytest.mark.parametrize("model_type", list(MODELS))
def test_a_transformers_directory_gives_transformers_outputs_and_what_bertology_writes_loads_there(
        model_type, directories, pairs, tmp_path, capsys):
    class_name, family, _ = MODELS[model_type]
    directory = directories(model_type)
    seq2seq = model_type == "t5"
    opened = open_model_dir(directory)
    assert opened.family.name == family
    ours, tokenizer = opened.load_model().eval(), opened.tokenizer()
    theirs = getattr(transformers, class_name).from_pretrained(directory).eval()
    their_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    groups = [([a], [b]) for a, b in zip(*pairs)] if unpadded(model_type) else [pairs]
    for group in groups:
        expected_batch = their_batch(their_tokenizer, group, model_type)
        batch = tokenizer(*group, truncation=True, max_length=MAX_LENGTH, padding=not unpadded(model_type))
        batch = {key: torch.as_tensor(value) for key, value in batch.items()}  # unpadded: lists
        names = ["input_ids", "attention_mask"] + (["token_type_ids"] if model_type in SEGMENTS else [])
        for key in names:
            assert batch[key].tolist() == expected_batch[key].tolist(), key
        expected = logits_of(theirs, expected_batch, names, seq2seq)
        real = expected_batch["attention_mask"].bool()
        if not unpadded(model_type):
            assert not real.all()  # a padded batch
        torch.testing.assert_close(logits_of(ours, batch, names, seq2seq)[real], expected[real], rtol=0, atol=1e-4)
    # Written back by bertology: transformers reads every key, and bertology reads the same weights again.
    ours.save_pretrained(tmp_path / "ours")
    tokenizer.save_pretrained(tmp_path / "ours")
    again, info = getattr(transformers, class_name).from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not any(info.values()), info
    again_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "ours")
    assert type(again_tokenizer) is type(their_tokenizer)
    for group in groups:
        batch = their_batch(again_tokenizer, group, model_type)
        assert batch["input_ids"].tolist() == their_batch(their_tokenizer, group, model_type)["input_ids"].tolist()
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(logits_of(again.eval(), batch, names, seq2seq)[real],
                                   logits_of(theirs, batch, names, seq2seq)[real], rtol=0, atol=1e-4)
    reloaded = load_model(tmp_path / "ours").state_dict()
    assert reloaded.keys() == ours.state_dict().keys()
    assert all(torch.equal(reloaded[key], value) for key, value in ours.state_dict().items())
    status, out, err = run_cli(capsys, "info", directory)
    assert status == 0, err
    lines = dict(line.split(":", 1) for line in out.splitlines() if not line.startswith(" "))
    assert lines["family"].strip().startswith(f"{family}: ")
    # The class AutoTokenizer makes of the directory (transformers 5 saves ELECTRA's as BertTokenizer).
    assert lines["tokenizer"].strip().startswith(f"{tokenizer.kind} ({type(their_tokenizer).__name__.removesuffix('Fast')})")


@pytest.mark.slow
@pytest.mark.parametrize("model_type", list(MODELS))
def test_finetune_evaluate_and_embed_take_a_transformers_directory(model_type, directories, data_dir, tmp_path, capsys):
    directory, sst2 = directories(model_type), data_dir / "glue/SST-2"
    capsys.readouterr()  # transformers' progress while the fixture wrote the directory
    lines = [row.split("\t")[0] for row in (sst2 / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:4]]
    (tmp_path / "lines.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    status, _, err = run_cli(capsys, "embed", "--model", directory, "--input", tmp_path / "lines.txt", "--level", "token",
                             "--out", tmp_path / "words.jsonl")
    if unpadded(model_type):  # a batch needs a token to pad with
        message = err.split("\r")[-1].strip()  # after the progress bar's last redraw
        assert status == 2 and message.count("\n") == 0 and "has no pad token" in message, err
        return
    assert status == 0, err
    words = [json.loads(line)["words"] for line in (tmp_path / "words.jsonl").read_text().splitlines()]
    assert words == [line.split() for line in lines]  # one vector per word, whatever the frame
    status, _, err = run_cli(capsys, "finetune", "--task", "sst2", "--data", sst2, "--model", directory,
                             "--out", tmp_path / "sst2", "--max-train-examples", "64", "--epochs", "1",
                             "--max-seq-len", "32", "--batch-size", "16", "--precision", "fp32", "--no-progress",
                             "--no-learning-curve")
    assert status == 0, err
    status, out, err = run_cli(capsys, "evaluate", "--model", tmp_path / "sst2", "--data", sst2, "--precision", "fp32")
    assert status == 0 and "accuracy" in out, err
    # What finetune saved loads in transformers with every key: a classifier (a T5 stays text to text).
    seq2seq = model_type == "t5"
    auto = transformers.AutoModelForSeq2SeqLM if seq2seq else transformers.AutoModelForSequenceClassification
    theirs, info = auto.from_pretrained(tmp_path / "sst2", output_loading_info=True)
    assert not any(info.values()), info
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "sst2")
    batch = their_batch(tokenizer, (lines, lines[::-1]), model_type)
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if model_type in SEGMENTS else [])
    theirs.config.pad_token_id = tokenizer.pad_token_id  # GPT-2's classifier finds each row's last token by it
    expected = logits_of(theirs.eval(), batch, names, seq2seq)
    torch.testing.assert_close(logits_of(load_model(tmp_path / "sst2").eval(), batch, names, seq2seq), expected,
                               rtol=0, atol=1e-4)
