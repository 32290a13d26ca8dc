"""GPT-2's byte-level BPE as `bertology tokenizer train --model bpe` learns it: saved as transformers
saves GPT-2's, loaded by transformers' AutoTokenizer (and by GPT2Tokenizer from vocab.json and
merges.txt alone) with the same ids, lossless on any text, the same on every run."""

import json
import shutil

import pytest
import transformers

from bertology.cli import main
from bertology.data.tokenizer import Tokenizer, train_tokenizer
from bertology.errors import UserError

WIKI_VALID = "wikitext-2-raw/wiki.valid.raw"
HARD_CASES = ["Café naïve Ωμέγα", "我爱北京 안녕하세요", "😀 👨\u200d👩\u200d👧", "\x00\x07 tab\tnew\nline ☃ \ue000",
              "before <|endoftext|> after", "  two leading spaces", ""]


@pytest.fixture(scope="module")
def bpe(data_dir, tmp_path_factory):
    """A 2,000-token byte-level BPE trained on WikiText-2 valid by the command line; (tokenizer, folder)."""
    folder = tmp_path_factory.mktemp("bpe")
    assert main(["tokenizer", "train", str(data_dir / WIKI_VALID), "--out", str(folder), "--model", "bpe",
                 "--vocab-size", "2000"]) == 0
    return Tokenizer.from_pretrained(folder), folder


@pytest.fixture(scope="module")
def texts(data_dir) -> list[str]:
    text = (data_dir / "wikitext-2-raw/wiki.test.raw").read_text(encoding="utf-8")
    return [line for line in text.split("\n") if line.strip()][:2000] + HARD_CASES


@pytest.mark.slow
def test_saved_as_transformers_saves_gpt2(bpe):
    tokenizer, folder = bpe
    assert {p.name for p in folder.iterdir()} >= {"vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json"}
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "GPT2Tokenizer" and config["add_prefix_space"] is False
    assert config["bos_token"] == config["eos_token"] == config["unk_token"] == "<|endoftext|>"
    assert config["pad_token"] is None and config["cls_token"] is None and config["mask_token"] is None
    assert tokenizer.kind == "bpe" and tokenizer.vocab_size == 2000
    assert tokenizer.special_tokens == dict.fromkeys(("bos", "eos", "unk"), "<|endoftext|>")
    assert tokenizer.convert_ids_to_tokens(0) == "<|endoftext|>"
    pipeline = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    assert pipeline["pre_tokenizer"]["type"] == "ByteLevel" and pipeline["normalizer"] is None


@pytest.mark.slow
def test_transformers_gives_the_same_ids_from_either_file(bpe, texts, tmp_path):
    tokenizer, folder = bpe
    ours = tokenizer(texts, padding=False, truncation=False, return_tensors=None)["input_ids"]
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(theirs).__name__ == "GPT2Tokenizer"
    assert theirs(texts)["input_ids"] == ours
    # vocab.json and merges.txt alone, as GPT-2's original release: the same ids
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(folder / name, tmp_path / name)
    assert transformers.GPT2Tokenizer.from_pretrained(tmp_path)(texts)["input_ids"] == ours
    assert Tokenizer.from_pretrained(tmp_path)(texts, padding=False, truncation=False,
                                              return_tensors=None)["input_ids"] == ours


@pytest.mark.slow
def test_any_text_decodes_back_exactly_and_spaces_are_part_of_words(bpe, texts):
    tokenizer, _ = bpe
    for text in texts:  # bytes, not characters: no text is unknown, none is lost
        assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=False) == text
    assert tokenizer.encode("The") != tokenizer.encode(" The")
    assert tokenizer.tokenize(" The cat")[0] == "ĠThe"
    assert tokenizer.encode("a <|endoftext|> b").count(0) == 1  # its special token is matched whole
    assert tokenizer.encode("hello", "world") == tokenizer.encode("hello") + tokenizer.encode("world")


@pytest.mark.slow
def test_the_same_vocabulary_and_merges_on_every_run(bpe, data_dir, tmp_path):
    _, folder = bpe
    train_tokenizer([data_dir / WIKI_VALID], vocab_size=2000, model="bpe", out_dir=tmp_path)
    for name in ("vocab.json", "merges.txt", "tokenizer.json"):
        assert (tmp_path / name).read_bytes() == (folder / name).read_bytes(), name


def test_command_line_reports_a_cased_bpe(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat sat on the mat\nA dog ran in the park\n" * 20, encoding="utf-8")
    assert main(["tokenizer", "train", str(corpus), "--out", str(tmp_path / "out"), "--model", "bpe",
                 "--vocab-size", "270"]) == 0
    assert capsys.readouterr().out.startswith("wrote a cased bpe vocabulary of 270 tokens")
    assert "".join(Tokenizer.from_pretrained(tmp_path / "out").tokenize("The cat")) == "TheĠcat"


def test_sentinels_follow_the_merges_and_a_small_vocabulary_is_refused(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\na dog ran in the park\n" * 20, encoding="utf-8")
    tokenizer = train_tokenizer([corpus], vocab_size=270, model="bpe", sentinels=3)
    assert tokenizer.vocab_size == 270 and tokenizer.sentinel_token_ids == [269, 268, 267]
    assert tokenizer.encode("a <extra_id_0> b").count(269) == 1
    with pytest.raises(UserError, match="too small for a byte-level BPE: its 256 byte symbols and <|endoftext|>"):
        train_tokenizer([corpus], vocab_size=256, model="bpe")
