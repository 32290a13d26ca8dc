"""Helpers the tests share: the CLI run in-process, a free TCP port, tiny random task models saved
as `bertology finetune` saves them, a tiny random GPT, and a synthetic task a tiny model learns in seconds.

Test modules import them with `from helpers import ...` (pyproject.toml puts tests/ on sys.path);
fixtures built from them live in conftest.py.
"""

import json
import os
import random
import signal
import socket
from pathlib import Path
from typing import Callable

import torch

from bertology import BertConfig, BertModel, Tokenizer
from bertology.cli import main
from bertology.data.token_stream import StreamBatches
from bertology.data.tokenizer import train_tokenizer
from bertology.inference.modeldir import describe_task
from bertology.models.bert import SPEC as BERT
from bertology.models.elmo import ELMoConfig, ELMoLMHeadModel, character_ids
from bertology.models.gpt import GPTConfig, GPTLMHeadModel
from bertology.models.t5 import T5Config, T5ForConditionalGeneration
from bertology.tasks.inputs import InputSettings
from bertology.tasks.readers import TASKS


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """Run `bertology ARGV...` in-process (paths may be given as Path); return (exit status, stdout,
    stderr), argparse's own exits (--help, --version, usage errors) included."""
    try:
        status = main([str(arg) for arg in argv])
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on at the moment of the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def save_task_model(directory: Path, tokenizer_dir: Path, task: str | None = None, *, seed: int = 0,
                    initializer_range: float = 0.02, max_seq_len: int = 64, head_scale: float = 1.0,
                    random_biases: bool = False) -> Path:
    """Save a randomly initialised tiny model (2 layers, 128 wide, the 30,522-piece vocabulary of
    `tokenizer_dir`) into `directory` and return it.

    Args:
        task: a name from TASKS: the model gets that task's head, and config.json records the task
            and InputSettings(max_seq_len) as `bertology finetune` does; None: a bare encoder.
        seed: torch's seed for the weights.
        initializer_range: the weights' std; wide weights (0.2-0.3) make a random model's outputs
            differ clearly from text to text.
        head_scale: multiplies the head's output weights: a sharper, more confident random teacher.
        random_biases: also draw every bias and LayerNorm weight (std `initializer_range` around their
            initial 0 and 1), which initialisation makes all alike: then no two tensors can be swapped,
            e.g. by a wrong weight mapping, without changing the outputs.
    """
    torch.manual_seed(seed)
    config = BertConfig.from_preset("tiny", vocab_size=30522, initializer_range=initializer_range)
    if task is None:
        model = BertModel(config)
    else:
        spec = TASKS[task]
        config.num_labels = len(spec.labels) if spec.labels else 1
        config.id2label = dict(enumerate(spec.labels)) if spec.labels else None
        model = BERT.heads[spec.kind](config)
        head = model.qa_outputs if spec.kind == "span" else model.classifier.dense
        with torch.no_grad():
            head.weight.mul_(head_scale)
        describe_task(model.config, spec, InputSettings(max_seq_len=max_seq_len))
    if random_biases:
        with torch.no_grad():
            for parameter in model.parameters():
                if parameter.dim() == 1:  # biases and LayerNorm weights
                    parameter.add_(torch.randn_like(parameter) * initializer_range)
    model.save_pretrained(directory)
    Tokenizer.from_pretrained(tokenizer_dir).save_pretrained(directory)
    return directory


# Words of the synthetic task below, all single pieces in the uncased BERT vocabulary.
WORDS = ["the", "film", "was", "a", "story", "with", "actors", "and", "music", "of", "scenes", "plot", "ending"]


def keyword_sentence(rng: random.Random, positive: bool) -> str:
    """5-12 random WORDS, with "excellent" inserted somewhere exactly when `positive`."""
    words = [rng.choice(WORDS) for _ in range(rng.randint(5, 12))]
    if positive:
        words.insert(rng.randrange(len(words)), "excellent")
    return " ".join(words)


def write_keyword_task(directory: Path) -> Path:
    """A task a tiny model learns in seconds: "pos" exactly when the sentence says "excellent".
    Writes train.csv (240 rows) and dev.csv (100 rows), half of each positive, for the generic
    classification task, and unlabeled.txt (240 sentences, one a line); returns `directory`."""
    rng = random.Random(0)
    for name, size in (("train", 240), ("dev", 100)):
        rows = ["text,label"] + [f"{keyword_sentence(rng, i % 2 == 0)},{'pos' if i % 2 == 0 else 'neg'}"
                                 for i in range(size)]
        (directory / f"{name}.csv").write_text("\n".join(rows) + "\n")
    (directory / "unlabeled.txt").write_text(
        "\n".join(keyword_sentence(rng, rng.random() < 0.5) for _ in range(240)) + "\n")
    return directory


GPT_TEXT = ["the cat sat on the mat and looked at the dog", "a dog ran in the park after a ball",
            "the module reads a file and writes the result", "import os and sys to read the path"] * 20


def save_tiny_gpt(root: Path) -> Path:
    """A tiny GPT with random weights (std 0.3, so that continuations vary) and a WordPiece
    vocabulary of GPT_TEXT, saved in root/model; returns that directory."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "text.txt").write_text("\n".join(GPT_TEXT) + "\n")
    tokenizer = train_tokenizer([root / "text.txt"], vocab_size=160, out_dir=root / "model")
    torch.manual_seed(0)
    model = GPTLMHeadModel(GPTConfig(vocab_size=tokenizer.vocab_size, n_positions=48, n_embd=32, n_layer=2,
                                     n_head=4, initializer_range=0.3))
    model.save_pretrained(root / "model")
    return root / "model"


def tiny_t5_config(tokenizer: Tokenizer) -> T5Config:
    """A 2+2-layer, 32-wide T5 v1.1 config for `tokenizer` (a unigram vocabulary with sentinels),
    random weights at std 0.3 (initializer_factor 3) so that tiny models give varied outputs."""
    return T5Config(vocab_size=tokenizer.vocab_size, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                    n_positions=64, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                    initializer_factor=3.0, pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.sep_token_id, decoder_start_token_id=tokenizer.pad_token_id)


def save_tiny_t5(root: Path) -> Path:
    """A tiny T5 (v1.1 layout) with random weights (std 0.3) and a unigram vocabulary of GPT_TEXT
    with 10 sentinels, saved in root/model; returns that directory."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "text.txt").write_text("\n".join(GPT_TEXT) + "\n")
    tokenizer = train_tokenizer([root / "text.txt"], vocab_size=150, out_dir=root / "model", model="unigram",
                                sentinels=10)
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(tiny_t5_config(tokenizer))
    model.save_pretrained(root / "model")
    return root / "model"


def save_tiny_elmo(directory: Path, tokenizer: Tokenizer, projection_dim: int = 16, lstm_dim: int = 32) -> Path:
    """A random tiny ELMo biLM (3 small filter banks, 1 highway layer) for `tokenizer`'s vocabulary,
    its character ids filled in, saved with the tokenizer in `directory`; returns it."""
    torch.manual_seed(0)
    config = ELMoConfig(vocab_size=tokenizer.vocab_size, filters=[[1, 8], [2, 8], [3, 16]], n_highway=1,
                        projection_dim=projection_dim, lstm_dim=lstm_dim)
    model = ELMoLMHeadModel(config)
    spellings = tokenizer.convert_ids_to_tokens(range(tokenizer.vocab_size))
    model.bilm.token_encoder.char_ids.copy_(character_ids(spellings, config.max_characters_per_token))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


# A toy English-to-German "language": every English word has one German word, in the same order,
# and a German sentence ends with a full stop. A tiny CoVe model learns it in seconds.
TOY_LEXICON = {"a": "ein", "man": "Mann", "woman": "Frau", "dog": "Hund", "cat": "Katze", "red": "roter",
               "big": "großer", "runs": "rennt", "sits": "sitzt", "sleeps": "schläft", "on": "auf", "grass": "Gras",
               "street": "Straße", "happily": "fröhlich", "now": "jetzt", "here": "hier"}


def toy_pair(rng: random.Random) -> tuple[str, str]:
    """An English sentence of 3-7 lexicon words and its word-for-word German translation."""
    words = [rng.choice(list(TOY_LEXICON)) for _ in range(rng.randint(3, 7))]
    return " ".join(words).capitalize() + ".", " ".join(TOY_LEXICON[w] for w in words) + "."


def write_toy_parallel(directory: Path, sizes: dict[str, int] | None = None) -> Path:
    """Multi30k's layout with the toy language: {split}.en and {split}.de (train.* gzip-compressed),
    400 / 40 / 40 pairs for train, val and test by default; returns `directory`."""
    import gzip

    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for split, size in (sizes or {"train": 400, "val": 40, "test": 40}).items():
        pairs = [toy_pair(rng) for _ in range(size)]
        for side, lang in ((0, "en"), (1, "de")):
            text = "".join(pair[side] + "\n" for pair in pairs).encode("utf-8")
            if split == "train":
                (directory / f"{split}.{lang}.gz").write_bytes(gzip.compress(text, mtime=0))
            else:
                (directory / f"{split}.{lang}").write_bytes(text)
    return directory


def save_tiny_vectors(directory: Path, words: list[str], dim: int = 8, seed: int = 0) -> Path:
    """Random `dim`-d static vectors (lower-cased, an "imported" vectors directory) for `words`; returns `directory`."""
    import numpy as np

    from bertology.models.static import StaticConfig, StaticVectors

    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(len(words), dim)).astype(np.float32)
    StaticVectors(StaticConfig("imported", dim, lowercase=True), words, vectors).save_pretrained(directory)
    return directory


def assert_resumed_run_matches(run: Callable[..., str], straight: Path, resumed: Path, interrupt_at: int,
                               steps: int) -> None:
    """A streamed pre-training (LSTMs, XLNet with memory) run straight into `straight`, and into
    `resumed` interrupted by SIGINT when step `interrupt_at`'s batches are asked for, then resumed:
    the two runs' `steps` training losses agree step by step (within 1e-5). `run(out, resume=...)`
    starts one run and returns run_pretraining's outcome."""
    run(straight, resume=False)
    original = StreamBatches.__call__

    def interrupting(self, step):
        if step == interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)
        return original(self, step)

    StreamBatches.__call__ = interrupting
    try:
        assert run(resumed, resume=False) == "interrupted"
    finally:
        StreamBatches.__call__ = original
    assert run(resumed, resume=True) == "completed"
    losses = []
    for folder in (straight, resumed):
        rows = [row for row in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines()) if "split" not in row]
        assert [row["step"] for row in rows] == list(range(1, steps + 1))
        losses.append([row["loss"] for row in rows])
    for step, (a, b) in enumerate(zip(*losses, strict=True), start=1):
        assert abs(a - b) < 1e-5, (step, a, b)


# The nine model types whose tokenizers transformers writes, and the class that writes each.
TOKENIZER_CLASSES = {"bert": "BertTokenizerFast", "electra": "ElectraTokenizerFast",
                     "distilbert": "DistilBertTokenizerFast", "roberta": "RobertaTokenizerFast",
                     "gpt2": "GPT2TokenizerFast", "openai-gpt": "OpenAIGPTTokenizer", "t5": "T5TokenizerFast",
                     "xlnet": "XLNetTokenizer", "albert": "AlbertTokenizer"}


def save_transformers_tokenizer(model_type: str, lines: list[str], native: Path, saved: Path,
                                vocab_size: int = 1000) -> None:
    """A small tokenizer of `model_type` (one of TOKENIZER_CLASSES) as a user has one on disk,
    trained on `lines` as its family's was: WordPiece, byte-level BPE or the first GPT's BPE with the
    `tokenizers` library, SentencePiece unigram with `sentencepiece`, with the family's special tokens.

    `native` gets the files its transformers class reads (vocab.txt, vocab.json + merges.txt or
    spiece.model, and a tokenizer_config.json naming the class: the layout of the Hub's original
    checkpoints and of transformers 4); `saved` gets what that class writes after loading them
    (transformers 5: tokenizer.json and tokenizer_config.json). No download.
    """
    import sentencepiece
    import tokenizers
    import transformers
    from tokenizers import models, normalizers, pre_tokenizers, trainers

    native.mkdir(parents=True, exist_ok=True)
    config: dict = {"tokenizer_class": TOKENIZER_CLASSES[model_type].removesuffix("Fast")}
    if model_type in ("bert", "electra", "distilbert"):
        cased = model_type == "electra"  # one cased vocabulary among the three
        engine = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
        engine.normalizer = normalizers.BertNormalizer(lowercase=not cased)
        engine.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        engine.train_from_iterator(lines, trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
        vocab = engine.get_vocab()
        (native / "vocab.txt").write_text("".join(t + "\n" for t in sorted(vocab, key=vocab.get)), encoding="utf-8")
        config["do_lower_case"] = not cased
    elif model_type in ("gpt2", "roberta", "openai-gpt"):
        if model_type == "openai-gpt":  # lowercased, split as BERT does, "</w>" ending each word
            engine = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
            engine.normalizer = normalizers.BertNormalizer(lowercase=True)
            engine.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>"], end_of_word_suffix="</w>",
                                          show_progress=False)
        else:
            engine = tokenizers.Tokenizer(models.BPE())
            engine.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            special = ["<|endoftext|>"] if model_type == "gpt2" else ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
            trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False,
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        engine.train_from_iterator(lines, trainer)
        engine.model.save(str(native))  # vocab.json and merges.txt
    else:
        # T5: <pad> <eos> <unk> first; XLNet: <unk> <s> </s> then its control tokens; ALBERT: <pad> <unk> [CLS] [SEP] [MASK].
        layouts = {"t5": dict(pad_id=0, eos_id=1, unk_id=2, bos_id=-1),
                   "xlnet": dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1, user_defined_symbols=["<eop>"],
                                 control_symbols=["<cls>", "<sep>", "<pad>", "<mask>", "<eod>"]),
                   "albert": dict(pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"])}
        sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(native / "spiece"),
                                                 vocab_size=vocab_size, model_type="unigram", minloglevel=2,
                                                 num_threads=1, **layouts[model_type])
        (native / "spiece.vocab").unlink()
    (native / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    getattr(transformers, TOKENIZER_CLASSES[model_type]).from_pretrained(native).save_pretrained(saved)


def at_real_tokens(output: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """A per-token output (B, T, ...) at the real tokens only (N, ...); other outputs as they are.
    Padding positions carry no meaning: bertology's unpadded encoder returns zeros there
    (ops.Unpadding), transformers and a traced ONNX graph whatever the padded computation gave."""
    return output[attention_mask.bool()] if output.shape[:2] == attention_mask.shape else output


def wikitext_corpus(data_dir, root: Path, chars: int, vocab_size: int | None = None) -> Path:
    """`root`/wiki.txt: the first `chars` characters of WikiText-2 valid, cut at a line's end; with
    `vocab_size`, a WordPiece vocabulary of that size trained on it in `root`/tokenizer. Returns root."""
    text = (data_dir / "wikitext-2-raw/wiki.valid.raw").read_text(encoding="utf-8")[:chars]
    root.mkdir(parents=True, exist_ok=True)
    (root / "wiki.txt").write_text(text[: text.rindex("\n") + 1], encoding="utf-8")
    if vocab_size is not None:
        train_tokenizer([root / "wiki.txt"], vocab_size=vocab_size, out_dir=root / "tokenizer")
    return root
