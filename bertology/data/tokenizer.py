"""BERT's WordPiece tokenizer (and T5's unigram vocabulary), run by the Hugging Face `tokenizers` engine.

BERT (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for
Language Understanding") splits text into WordPiece units (Wu et al. 2016, "Google's
Neural Machine Translation System"). The pipeline is the one of Google's
`tokenization.py`, built from `tokenizers` parts:

1. normalize (`BertNormalizer`): drop control characters and U+FFFD, turn every
   whitespace character into a space, put spaces around CJK ideographs, lowercase and
   strip accents (NFD, then drop combining marks of category Mn) when uncased;
2. pre-tokenize (`BertPreTokenizer`): split on whitespace and around every punctuation
   character;
3. WordPiece: greedy longest-match-first against the vocabulary, continuation pieces
   prefixed with "##"; a word longer than 100 characters (transformers' limit; Google's
   is 200, see `MAX_INPUT_CHARS_PER_WORD`), or one that cannot be covered, becomes [UNK];
4. post-process: "[CLS] A [SEP]" or "[CLS] A [SEP] B [SEP]", token type 0 for A, 1 for B.

Special tokens ([PAD] [UNK] [CLS] [SEP] [MASK]) are matched in the raw text and never split.

Hangul policy (`keep_hangul`). BERT's accent stripping decomposes with NFD, which also
splits every Korean Hangul syllable into its jamo letters ("한" -> "ᄒ" "ᅡ" "ᆫ"), and
the uncased BERT vocabularies were built from jamo. A tokenizer loaded from a BERT
checkpoint therefore keeps that behaviour (`keep_hangul` absent or false: BERT-exact).
Vocabularies trained by bertology (`train_tokenizer`) set `keep_hangul=True`: after
BERT's normalizer an NFC step recomposes the jamo into syllables, so Korean words are
learned and split as syllables. Accents are stripped exactly as before, and because no
combining mark is left to recompose, Latin, Greek, Cyrillic and CJK text comes out
identical to BERT. (NFC also rejoins the few vowel signs of some Indic scripts, such as
Tamil "ொ", that decompose into two spacing marks; BERT would leave those as two.)
`keep_hangul` changes nothing when accents are not stripped (cased tokenizers).

Known differences from Google's pure-Python tokenizer, inherited from the `tokenizers`
engine (the same as transformers' BertTokenizerFast, which every Hub checkpoint uses):
Python's `str.lower()` turns a word-final capital sigma into "ς" where the engine gives
"σ" ("ΟΔΟΣ" -> "οδος" vs "οδοσ"); and the engine's Unicode tables are older than
Python's, so a few hundred rare code points that were assigned or re-categorised in
recent Unicode versions are treated differently (Python drops unassigned characters, the
engine keeps them as [UNK]).

A unigram vocabulary (Kudo 2018, "Subword Regularization"; SentencePiece's default and T5's)
is the same class with `scores` (each piece's log probability): the engine picks the most
probable segmentation of each word (Viterbi) instead of the longest match. Its text is not
split at punctuation: spaces become "▁" and begin the piece that follows, so `decode` restores
the text's spacing (after NFKC normalisation, and lowercasing when uncased; accents are kept).
`train_tokenizer(model="unigram")` learns one with the `tokenizers` UnigramTrainer (EM, then
pruning) and appends T5's sentinel tokens <extra_id_99> ... <extra_id_0> (<extra_id_0> last),
which span corruption (span_corruption.py) puts in place of dropped spans. The five special
tokens are the same in both models, so every pipeline here works with either.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import tokenizers
import torch
from tokenizers import decoders, normalizers, pre_tokenizers, processors, trainers
from tokenizers.models import Unigram, WordPiece

from ..errors import UserError
from ..files import atomic_path, loads_json, write_json_atomic, write_text_atomic
from .corpus import ReadStats, corpus_lines, text_files

PAD, UNK, CLS, SEP, MASK = SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZER_MODELS = ("wordpiece", "unigram")
SENTINEL = re.compile(r"<extra_id_(\d+)>")  # T5's sentinel tokens, numbered from 0


# Longer words become [UNK] whole. Google's tokenization.py allows 200 characters; we follow
# transformers (BertTokenizer and BertTokenizerFast) and the `tokenizers` engine, which allow
# 100, because every Hub checkpoint is used through them and our ids must equal theirs (the
# parity tests hold us to it). Only words of 101-200 characters differ, after the split at
# whitespace and punctuation: long numbers, hashes, chemical names.
MAX_INPUT_CHARS_PER_WORD = 100


DEFAULT_MODEL_MAX_LENGTH = 512  # BERT's position table


VOCAB_FILE = "vocab.txt"


CONFIG_FILE = "tokenizer_config.json"


PIPELINE_FILE = "tokenizer.json"


SPECIAL_TOKENS_FILE = "special_tokens_map.json"


# The special tokens plus room for a basic alphabet; training also checks the corpus's own.
MIN_VOCAB_SIZE = 128


_TRAIN_BATCH_LINES = 1000  # lines handed to the Rust trainer per call: amortises Python overhead


# transformers writes int(1e30) as model_max_length for "no limit"; treat anything this big so.
_HF_NO_LIMIT = 10**18


class BatchEncoding(dict):
    """The output of `Tokenizer.__call__`: a dict of model inputs plus per-token alignment.

    Keys: `input_ids`, `token_type_ids`, `attention_mask` (each (batch, seq_len) LongTensors,
    or lists of lists without tensors) and `offset_mapping` ((batch, seq_len, 2)) when asked.
    The alignment methods serve token classification (`word_ids`) and extractive QA
    (`sequence_ids` together with `offset_mapping`).
    """

    def __init__(self, data: dict, encodings: list[tokenizers.Encoding]):
        super().__init__(data)
        self.encodings = encodings

    def tokens(self, index: int = 0) -> list[str]:
        """The token strings of row `index`, special and padding tokens included."""
        return self.encodings[index].tokens

    def word_ids(self, index: int = 0) -> list[int | None]:
        """For each token of row `index`, the index of the word it came from; None for special
        and padding tokens. Words are numbered from 0 within each sequence of a pair."""
        return self.encodings[index].word_ids

    def sequence_ids(self, index: int = 0) -> list[int | None]:
        """For each token of row `index`: 0 for text A, 1 for text B, None for special tokens."""
        return self.encodings[index].sequence_ids


class Tokenizer:
    """BERT's WordPiece tokenizer.

    Each word is split greedily into the longest pieces found in the vocabulary, pieces
    after the first carrying the "##" prefix. For example, with a vocabulary holding
    "un", "##aff" and "##able":

        >>> tokenizer.tokenize("unaffable")
        ['un', '##aff', '##able']

    Args:
        vocab: the tokens in id order (line i of vocab.txt is id i). Must hold
            [PAD] [UNK] [CLS] [SEP] [MASK], each once.
        scores: a unigram vocabulary: each token's log probability, in the same order
            (None: WordPiece).
        do_lower_case: lowercase the text (uncased models).
        strip_accents: drop accents; None follows `do_lower_case`, as in BERT.
        tokenize_chinese_chars: put spaces around CJK ideographs, so each is its own word.
        keep_hangul: recompose Hangul syllables after accent stripping (see the module
            docstring); False reproduces BERT exactly.
        model_max_length: the default `max_length` for encoding.
    """

    def __init__(
        self,
        vocab: Sequence[str],
        *,
        scores: Sequence[float] | None = None,
        do_lower_case: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        keep_hangul: bool = False,
        model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
    ):
        _check_vocab(vocab, "vocabulary")
        if scores is not None and len(scores) != len(vocab):
            raise UserError(f"a unigram vocabulary needs one score per token: {len(vocab)} tokens, {len(scores)} scores")
        self.scores = None if scores is None else [float(score) for score in scores]
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.keep_hangul = keep_hangul
        self.model_max_length = model_max_length
        self._tokens = list(vocab)
        self._ids = {token: i for i, token in enumerate(self._tokens)}
        numbered = {int(m.group(1)): i for i, token in enumerate(self._tokens) if (m := SENTINEL.fullmatch(token))}
        self._sentinel_ids = [numbered[n] for n in sorted(numbered)]
        self._engine = self._build_engine()

    @property
    def model(self) -> str:
        """"wordpiece" or "unigram"."""
        return "wordpiece" if self.scores is None else "unigram"

    def _build_engine(self) -> tokenizers.Tokenizer:
        normalizer = _normalizer(
            do_lower_case=self.do_lower_case,
            strip_accents=self.strip_accents,
            tokenize_chinese_chars=self.tokenize_chinese_chars,
            recompose_hangul=self._recomposes_hangul,
        )
        if self.scores is None:
            engine = tokenizers.Tokenizer(
                WordPiece(
                    self._ids,
                    unk_token=UNK,
                    continuing_subword_prefix="##",
                    max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
                )
            )
            engine.normalizer = normalizer
            engine.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            engine.decoder = decoders.WordPiece(prefix="##")
        else:
            engine = tokenizers.Tokenizer(Unigram(list(zip(self._tokens, self.scores)), unk_id=self._ids[UNK]))
            # NFKC first: it can make capitals ("№" -> "No") that lowercasing must then see.
            engine.normalizer = _unigram_normalizer(normalizer)
            engine.pre_tokenizer = pre_tokenizers.Metaspace()
            engine.decoder = decoders.Metaspace()
        engine.post_processor = processors.TemplateProcessing(
            single=f"{CLS} $A {SEP}",
            pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
            special_tokens=[(CLS, self._ids[CLS]), (SEP, self._ids[SEP])],
        )
        # Already in the vocab: they keep their ids, and the text is never split inside them.
        engine.add_special_tokens(list(SPECIAL_TOKENS) + [self._tokens[i] for i in self.sentinel_token_ids])
        return engine

    @property
    def _recomposes_hangul(self) -> bool:
        """Whether `keep_hangul` has work to do: only accent stripping decomposes Hangul."""
        strips_accents = self.do_lower_case if self.strip_accents is None else self.strip_accents
        return self.keep_hangul and strips_accents

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> Tokenizer:
        """Load a tokenizer from a folder holding `vocab.txt` and, optionally, `tokenizer_config.json`.

        The pipeline is rebuilt from those two files; a `tokenizer.json` in the folder is
        ignored, since its padding and truncation settings would silently change the output.

        Args:
            directory: a bertology or Hugging Face BERT tokenizer folder.

        Returns:
            The tokenizer. Without a config file the options are BERT uncased defaults.
        """
        directory = Path(directory)
        if not directory.is_dir():
            raise UserError(f"{directory}: tokenizer folder not found")
        options = _read_config(directory / CONFIG_FILE)
        if options.pop("tokenizer_model", "wordpiece") == "unigram":
            vocab, scores = _read_unigram(directory / PIPELINE_FILE)
            return cls(vocab, scores=scores, **options)
        return cls(read_vocab(directory / VOCAB_FILE), **options)

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write `vocab.txt`, `tokenizer.json`, `tokenizer_config.json` and `special_tokens_map.json`.

        transformers' AutoTokenizer loads the folder and tokenizes identically.

        Args:
            directory: the output folder, created if needed.
        """
        directory = Path(directory)
        write_text_atomic(directory / VOCAB_FILE, "".join(token + "\n" for token in self._tokens))
        write_json_atomic(directory / CONFIG_FILE, self._config())
        write_json_atomic(directory / SPECIAL_TOKENS_FILE, _special_tokens_map())
        # Padding and truncation are per-call engine settings; they must not be saved.
        self._engine.no_padding()
        self._engine.no_truncation()
        with atomic_path(directory / PIPELINE_FILE) as tmp:
            self._engine.save(str(tmp))

    def _config(self) -> dict:
        # transformers 5's BertTokenizer rebuilds its normalizer from the config keys and
        # would drop the NFC step of keep_hangul; the generic class runs tokenizer.json as is.
        generic = self._recomposes_hangul or self.scores is not None
        sentinels = [self._tokens[i] for i in self.sentinel_token_ids]
        return {
            "tokenizer_class": "PreTrainedTokenizerFast" if generic else "BertTokenizer",
            "tokenizer_model": self.model,
            "do_lower_case": self.do_lower_case,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
            "keep_hangul": self.keep_hangul,
            "model_max_length": self.model_max_length,
            # The generic class would otherwise leave token_type_ids out, losing segment B.
            "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
            **_special_tokens_map(),
            **({"extra_special_tokens": sentinels} if sentinels else {}),
        }

    def __call__(
        self,
        texts: str | Sequence[str],
        text_pairs: str | Sequence[str] | None = None,
        max_length: int | None = None,
        padding: bool | str = True,
        truncation: bool = True,
        return_tensors: str | None = "pt",
        return_offsets_mapping: bool = False,
    ) -> BatchEncoding:
        """Encode a batch of texts (or text pairs) into model inputs.

        Args:
            texts: one text or a list of texts (text A).
            text_pairs: optional text B for each text: "[CLS] A [SEP] B [SEP]".
            max_length: the longest row, special tokens included; default `model_max_length`.
            padding: True pads with [PAD] to the longest row of the batch, "max_length" to
                `max_length`, False not at all (rows then stay lists: ragged rows are no tensor).
            truncation: cut rows to `max_length`, taking tokens from the longer of A and B
                first ("longest_first").
            return_tensors: "pt" for torch LongTensors, None for lists.
            return_offsets_mapping: add `offset_mapping`, the (start, end) character span of
                each token in its own text; (0, 0) for special and padding tokens.

        Returns:
            A `BatchEncoding` with `input_ids`, `token_type_ids`, `attention_mask`, each of
            shape (batch, seq_len), and the `word_ids` / `sequence_ids` alignment methods.
        """
        if return_tensors not in ("pt", None):
            raise ValueError(f"return_tensors must be 'pt' or None, got {return_tensors!r}")
        batch = [texts] if isinstance(texts, str) else list(texts)
        if text_pairs is not None:
            pairs = [text_pairs] if isinstance(text_pairs, str) else list(text_pairs)
            if len(pairs) != len(batch):
                raise ValueError(f"got {len(batch)} texts but {len(pairs)} text pairs")
            batch = list(zip(batch, pairs))
        encodings = self._encode(batch, max_length=max_length, padding=padding, truncation=truncation)
        data = {
            "input_ids": [e.ids for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
        }
        if return_offsets_mapping:
            data["offset_mapping"] = [e.offsets for e in encodings]
        if return_tensors == "pt" and padding:
            data = {key: torch.tensor(rows, dtype=torch.long) for key, rows in data.items()}
        return BatchEncoding(data, encodings)

    def _encode(
        self,
        batch: list[str] | list[tuple[str, str]],
        *,
        max_length: int | None,
        padding: bool | str,
        truncation: bool,
        add_special_tokens: bool = True,
    ) -> list[tokenizers.Encoding]:
        """Set the engine's padding and truncation for this call, then encode the batch in parallel.

        The settings live on the shared engine, so one Tokenizer must not be called from
        several threads at once.
        """
        if max_length is None:
            max_length = self.model_max_length
        if padding not in (True, False, "max_length"):
            raise ValueError(f"padding must be True, False or 'max_length', got {padding!r}")
        if padding == "max_length" and not truncation:
            raise ValueError("padding='max_length' needs truncation=True, or long rows would not fit")
        if truncation:
            pairs = bool(batch) and isinstance(batch[0], tuple)
            needed = self._engine.num_special_tokens_to_add(pairs) if add_special_tokens else 0
            if max_length <= needed:
                # The engine would silently return rows longer than max_length.
                raise UserError(f"max_length={max_length} is too small: special tokens alone take {needed}")
            self._engine.enable_truncation(max_length, strategy="longest_first")
        else:
            self._engine.no_truncation()
        if padding:
            length = max_length if padding == "max_length" else None
            self._engine.enable_padding(pad_id=self.pad_token_id, pad_token=PAD, length=length)
        else:
            self._engine.no_padding()
        return self._engine.encode_batch(batch, add_special_tokens=add_special_tokens)

    def encode(
        self,
        text: str,
        text_pair: str | None = None,
        *,
        add_special_tokens: bool = True,
        max_length: int | None = None,
        truncation: bool = True,
    ) -> list[int]:
        """Token ids of one text (or pair), without padding.

        Args:
            text: text A.
            text_pair: optional text B.
            add_special_tokens: add [CLS] and [SEP].
            max_length: the longest result; default `model_max_length`.
            truncation: cut to `max_length` (longest_first).

        Returns:
            The ids, e.g. [CLS] A [SEP] B [SEP].
        """
        item = text if text_pair is None else (text, text_pair)
        (encoding,) = self._encode(
            [item],
            max_length=max_length,
            padding=False,
            truncation=truncation,
            add_special_tokens=add_special_tokens,
        )
        return encoding.ids

    def tokenize(self, text: str) -> list[str]:
        """The WordPiece (or unigram) tokens of `text`, without special tokens or truncation."""
        (encoding,) = self._encode(
            [text], max_length=None, padding=False, truncation=False, add_special_tokens=False
        )
        return encoding.tokens

    def normalize(self, text: str) -> str:
        """`text` as the WordPiece model sees it: cleaned, lowercased and accent-stripped as configured."""
        return self._engine.normalizer.normalize_str(text)

    def decode(self, ids: Iterable[int] | torch.Tensor, skip_special_tokens: bool = True) -> str:
        """Turn ids back into text: "##" pieces are glued to the previous piece.

        Args:
            ids: token ids, a list or a 1-D tensor.
            skip_special_tokens: leave out [CLS], [SEP], [PAD] and the other special tokens.

        Returns:
            The text, normalized (lowercased for uncased models), with spaces between words
            and none before punctuation.
        """
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self._engine.decode(ids, skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: int | Iterable[int]) -> str | list[str]:
        """The token string of one id, or the list of token strings of several."""
        if isinstance(ids, int):
            return self._tokens[ids]
        return [self._tokens[i] for i in ids]

    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | list[int]:
        """The id of one token, or the ids of several; tokens outside the vocabulary map to [UNK]."""
        unk = self.unk_token_id
        if isinstance(tokens, str):
            return self._ids.get(tokens, unk)
        return [self._ids.get(token, unk) for token in tokens]

    @property
    def vocab_size(self) -> int:
        """The number of tokens in the vocabulary (the embedding table's rows)."""
        return len(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    @property
    def pad_token_id(self) -> int:
        return self._ids[PAD]

    @property
    def unk_token_id(self) -> int:
        return self._ids[UNK]

    @property
    def cls_token_id(self) -> int:
        return self._ids[CLS]

    @property
    def sep_token_id(self) -> int:
        return self._ids[SEP]

    @property
    def mask_token_id(self) -> int:
        return self._ids[MASK]

    @property
    def special_token_ids(self) -> frozenset[int]:
        """The ids of [PAD] [UNK] [CLS] [SEP] [MASK] and the sentinels (never masked or predicted
        in pre-training)."""
        return frozenset([self._ids[token] for token in SPECIAL_TOKENS] + self.sentinel_token_ids)

    @property
    def sentinel_token_ids(self) -> list[int]:
        """The ids of <extra_id_0>, <extra_id_1>, ... in that order ([] when the vocabulary has none)."""
        return list(self._sentinel_ids)

    def __repr__(self) -> str:
        return (
            f"Tokenizer(model={self.model}, vocab_size={self.vocab_size}, do_lower_case={self.do_lower_case}, "
            f"strip_accents={self.strip_accents}, keep_hangul={self.keep_hangul})"
        )


def train_tokenizer(
    files: str | os.PathLike | Iterable[str | os.PathLike],
    vocab_size: int,
    cased: bool = False,
    out_dir: str | os.PathLike | None = None,
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    skip_bad_lines: bool = False,
    text_field: str = "text",
    stats: ReadStats | None = None,
    model: str = "wordpiece",
    sentinels: int = 0,
) -> Tokenizer:
    """Learn a new WordPiece (or unigram) vocabulary from a corpus (text, JSONL or Parquet, maybe compressed).

    Text is normalized and pre-tokenized as BERT does (uncased: lowercase, strip accents,
    with `keep_hangul=True`), then the `tokenizers` WordPieceTrainer learns the vocabulary.
    Files are streamed line by line (see `corpus_lines`), so the corpus need not fit in
    memory; they are read twice, the first time to fix the alphabet so that training is
    deterministic.

    Args:
        files: corpus files and/or folders (see `text_files`).
        vocab_size: the vocabulary size, special tokens included.
        cased: keep case and accents (BERT "cased"); the default is uncased.
        out_dir: if given, save the tokenizer there (see `Tokenizer.save_pretrained`).
        min_frequency: the fewest occurrences for a merged piece to enter the vocabulary.
        limit_alphabet: keep at most this many distinct characters; rarer ones become [UNK].
        skip_bad_lines: skip lines that are not valid UTF-8 (or JSONL lines that are not
            JSON objects) instead of failing.
        text_field: the JSONL field or Parquet column holding the text.
        stats: if given, gets the number of files and of skipped lines (counted once,
            though the corpus is read twice).
        model: "wordpiece" (BERT's) or "unigram" (SentencePiece's, T5's: see the module docstring).
        sentinels: append this many sentinel tokens, <extra_id_{sentinels-1}> ... <extra_id_0>
            (T5: 100), counted in vocab_size.

    Returns:
        The tokenizer, with [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4.

    Raises:
        UserError: as `read_documents` for the corpus, or a vocabulary too small for it.
    """
    paths = text_files(files)
    if model not in TOKENIZER_MODELS:
        raise UserError(f"unknown tokenizer model {model!r}; choose one of {', '.join(TOKENIZER_MODELS)}")
    if not 0 <= sentinels <= 1000:
        raise UserError(f"sentinels={sentinels}: give 0 to 1000 sentinel tokens (T5 has 100)")
    if vocab_size - sentinels < MIN_VOCAB_SIZE:
        raise UserError(f"vocab_size={vocab_size} is too small: use at least {MIN_VOCAB_SIZE}"
                        f"{f' besides the {sentinels} sentinels' if sentinels else ''}")
    sentinel_tokens = [f"<extra_id_{n}>" for n in reversed(range(sentinels))]  # T5: <extra_id_0> last
    if model == "unigram":
        tokens, scores = _learn_unigram(_line_batches(paths, text_field, skip_bad_lines, stats), cased,
                                        vocab_size - sentinels)
        tokenizer = Tokenizer(tokens + sentinel_tokens, scores=scores + [0.0] * sentinels, do_lower_case=not cased,
                              strip_accents=False, tokenize_chinese_chars=False)
        if out_dir is not None:
            tokenizer.save_pretrained(out_dir)
        return tokenizer
    # The trainer numbers the "##" pieces of single characters in hash-map order, and ranks
    # merges of equal count by those numbers, so two runs can learn different vocabularies
    # (tokenizers issue #1794). A first pass without merges finds the alphabet; passing its
    # "##" pieces in sorted order as fixed tokens makes the result the same on every run.
    alphabet = _learn_wordpiece(
        _line_batches(paths, text_field, skip_bad_lines, ReadStats()),
        cased, 0, min_frequency, limit_alphabet, SPECIAL_TOKENS,
    )
    if len(alphabet) > vocab_size:
        raise UserError(
            f"vocab_size={vocab_size} is too small for this corpus: its alphabet alone, in word-start "
            f"and '##' forms, needs {len(alphabet)} entries; raise vocab_size or lower limit_alphabet"
        )
    continuations = sorted(token for token in alphabet if token.startswith("##"))
    ids = _learn_wordpiece(
        _line_batches(paths, text_field, skip_bad_lines, stats),
        cased, vocab_size - sentinels, min_frequency, limit_alphabet, SPECIAL_TOKENS + tuple(continuations),
    )
    tokenizer = Tokenizer(sorted(ids, key=ids.get) + sentinel_tokens, do_lower_case=not cased, keep_hangul=True)
    if out_dir is not None:
        tokenizer.save_pretrained(out_dir)
    return tokenizer


def _learn_wordpiece(
    batches: Iterator[list[str]],
    cased: bool,
    vocab_size: int,
    min_frequency: int,
    limit_alphabet: int,
    fixed_tokens: Sequence[str],
) -> dict[str, int]:
    """One run of the WordPiece trainer over the corpus's line `batches`; returns token -> id.

    `fixed_tokens` take the first ids, in the order given.
    """
    engine = tokenizers.Tokenizer(
        WordPiece(
            unk_token=UNK, continuing_subword_prefix="##", max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD
        )
    )
    # The normalizer of the Tokenizer built from the result: keep_hangul=True, uncased unless `cased`.
    engine.normalizer = _normalizer(
        do_lower_case=not cased, strip_accents=None, tokenize_chinese_chars=True, recompose_hangul=not cased
    )
    engine.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        limit_alphabet=limit_alphabet,
        special_tokens=list(fixed_tokens),
        continuing_subword_prefix="##",
        show_progress=False,
    )
    engine.train_from_iterator(batches, trainer)
    return engine.get_vocab()


def _learn_unigram(batches: Iterator[list[str]], cased: bool, vocab_size: int) -> tuple[list[str], list[float]]:
    """The `tokenizers` UnigramTrainer over the corpus's line `batches`: the pieces in id order
    (the five special tokens first) and their log probabilities."""
    engine = tokenizers.Tokenizer(Unigram())
    bert = _normalizer(do_lower_case=not cased, strip_accents=False, tokenize_chinese_chars=False,
                       recompose_hangul=False)
    engine.normalizer = _unigram_normalizer(bert)  # as Tokenizer builds it
    engine.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), unk_token=UNK,
                                      max_piece_length=16, show_progress=False)
    engine.train_from_iterator(batches, trainer)
    pieces = json.loads(engine.to_str())["model"]["vocab"]
    special, learned = pieces[:len(SPECIAL_TOKENS)], pieces[len(SPECIAL_TOKENS):]
    # Two things vary from run to run (the trainer iterates hash sets): its sums, in the 11th
    # decimal, and which of the rarest characters it keeps as learned pieces at the lowest score
    # and which it adds below them, 1e-4 apart, so that every text can be spelled. Rounded
    # scores, one score for all of those characters (1 below the least probable piece of
    # several characters), and ties ordered by the piece give the same ids on every run.
    floor = round(min((score for piece, score in learned if len(piece) > 1), default=0.0), 4)
    learned = [(piece, floor - 1.0 if len(piece) == 1 and round(score, 4) <= floor else round(score, 4))
               for piece, score in learned]
    learned.sort(key=lambda item: (-item[1], item[0]))
    return [piece for piece, _ in special + learned], [score for _, score in special + learned]


def read_vocab(path: str | os.PathLike) -> list[str]:
    """Read a BERT vocab.txt: one token per line, line i (from 0) is id i.

    Raises:
        UserError: the file is missing, not UTF-8, empty, repeats a token or lacks a special token.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: vocabulary file not found (expected one token per line)")
    text = _decode_utf8(path.read_bytes(), path)
    # Split on "\n" only, as transformers does: str.splitlines would also split inside tokens
    # holding characters such as U+2028 or U+0085.
    tokens = text.replace("\r\n", "\n").split("\n")
    if tokens[-1] == "":
        tokens.pop()
    _check_vocab(tokens, str(path))
    return tokens


def _read_unigram(path: Path) -> tuple[list[str], list[float]]:
    """The pieces and scores of a unigram tokenizer.json (its model's "vocab": [[piece, score], ...])."""
    if not path.is_file():
        raise UserError(f"{path}: not found (a unigram tokenizer keeps its pieces and their scores there)")
    try:
        model = loads_json(_decode_utf8(path.read_bytes(), path)).get("model", {})
        pieces = [(str(piece), float(score)) for piece, score in model["vocab"]] if model.get("type") == "Unigram" else None
    except json.JSONDecodeError as error:
        raise UserError(f"{path}:{error.lineno}: invalid JSON ({error.msg})") from None
    except (AttributeError, KeyError, TypeError, ValueError):
        pieces = None
    if not pieces:
        raise UserError(f"{path}: expected a Unigram model with a vocab of [piece, score] pairs")
    tokens = [piece for piece, _ in pieces]
    _check_vocab(tokens, str(path))
    return tokens, [score for _, score in pieces]


def _check_vocab(tokens: Sequence[str], source: str) -> None:
    """Raise UserError unless `tokens` is non-empty, has no repeats and holds every special token."""
    if not tokens:
        raise UserError(f"{source}: the vocabulary is empty")
    first_line: dict[str, int] = {}
    for line, token in enumerate(tokens, start=1):
        if token in first_line:
            raise UserError(f"{source}:{line}: duplicate token {token!r} (first on line {first_line[token]})")
        first_line[token] = line
    missing = [token for token in SPECIAL_TOKENS if token not in first_line]
    if missing:
        raise UserError(f"{source}: the vocabulary lacks the special tokens {' '.join(missing)}")


def _decode_utf8(data: bytes, path: Path) -> str:
    """Decode the whole content `data` of `path`; name the bad line if it fails."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = 1 + data.count(b"\n", 0, error.start)
        raise UserError(f"{path}:{line}: not valid UTF-8 ({error.reason})") from None


def _read_config(path: Path) -> dict:
    """The Tokenizer options stored in tokenizer_config.json ({} if the file is absent).

    Keys that belong to transformers but not to us (class name, special token spellings,
    ...) are ignored.
    """
    if not path.is_file():
        return {}
    try:
        config = loads_json(_decode_utf8(path.read_bytes(), path))
    except json.JSONDecodeError as error:
        raise UserError(f"{path}:{error.lineno}: invalid JSON ({error.msg})") from None
    if not isinstance(config, dict):
        raise UserError(f"{path}: expected a JSON object")
    options = {}
    for key, allowed, kinds in (
        ("do_lower_case", "true or false", (bool,)),
        ("strip_accents", "true, false or null", (bool, type(None))),
        ("tokenize_chinese_chars", "true or false", (bool,)),
        ("keep_hangul", "true or false", (bool,)),
        ("model_max_length", "a positive integer", (int,)),
        ("tokenizer_model", " or ".join(TOKENIZER_MODELS), (str,)),
    ):
        if key not in config:
            continue
        value = config[key]
        if (type(value) not in kinds or (key == "model_max_length" and value < 1)
                or (key == "tokenizer_model" and value not in TOKENIZER_MODELS)):
            raise UserError(f"{path}: field {key!r} must be {allowed}, got {value!r}")
        options[key] = value
    if options.get("model_max_length", 0) >= _HF_NO_LIMIT:
        del options["model_max_length"]  # "no limit": BERT's position table is the limit
    return options


def _special_tokens_map() -> dict[str, str]:
    return {"pad_token": PAD, "unk_token": UNK, "cls_token": CLS, "sep_token": SEP, "mask_token": MASK}


def _normalizer(
    *, do_lower_case: bool, strip_accents: bool | None, tokenize_chinese_chars: bool, recompose_hangul: bool
) -> normalizers.Normalizer:
    """BERT's normalizer, followed by NFC when the Hangul that accent stripping split must be rejoined."""
    bert = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=tokenize_chinese_chars,
        strip_accents=strip_accents,
        lowercase=do_lower_case,
    )
    if recompose_hangul:
        # Stripping left no Mn marks, so NFC can only rejoin what NFD split without marks:
        # Hangul syllables (and a few Indic vowel signs).
        return normalizers.Sequence([bert, normalizers.NFC()])
    return bert


def _unigram_normalizer(bert: normalizers.Normalizer) -> normalizers.Normalizer:
    """SentencePiece's normalisation around BERT's cleaning and lowercasing: NFKC first (it can
    make capitals, "№" -> "No", that lowercasing must then see), then runs of whitespace become
    one space and the ends are stripped, so that decoding restores the text's words and spacing."""
    return normalizers.Sequence([normalizers.NFKC(), bert, normalizers.Replace(tokenizers.Regex(" {2,}"), " "),
                                 normalizers.Strip()])


def _line_batches(
    paths: list[Path], text_field: str, skip_bad_lines: bool, stats: ReadStats | None
) -> Iterator[list[str]]:
    """Yield the corpus's non-blank lines in batches (see `corpus_lines`).

    Raises:
        UserError: a bad line (naming file and line; see `read_documents`) or no text at all.
    """
    lines = (line for line in corpus_lines(paths, text_field, skip_bad_lines, stats) if line)
    seen_text = False
    while batch := list(itertools.islice(lines, _TRAIN_BATCH_LINES)):
        seen_text = True
        yield batch
    if not seen_text:
        shown = ", ".join(map(str, paths[:3])) + (", ..." if len(paths) > 3 else "")
        raise UserError(f"{shown}: the corpus has no text, only blank lines")
