"""The tokenizer: text -> token ids and back, run by the Hugging Face `tokenizers` engine.

A `Tokenizer` is read from any tokenizer directory transformers writes (data/tokenizer_files.py:
`tokenizer.json`, GPT-2's `vocab.json` + `merges.txt`, a SentencePiece `spiece.model`, BERT's
`vocab.txt`) and written back the same way, so that transformers' `AutoTokenizer` loads what
bertology saves with the same ids. Its special tokens are known by role (`special_tokens`: bos,
eos, unk, sep, pad, cls, mask; GPT-2 has only bos, eos and unk, all <|endoftext|>) and its `kind`
says which of four tokenizers it is: "wordpiece" (BERT, ELECTRA, DistilBERT), "bpe" (GPT-2,
RoBERTa, the first GPT), "unigram" (bertology's own) or "sentencepiece" (T5, XLNet, ALBERT).
The special tokens around a text and a pair are each class's own (data/tokenizer_files.py).

bertology trains three of them (`train_tokenizer`): BERT's WordPiece, a unigram vocabulary, and
GPT-2's byte-level BPE.

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

GPT-2's byte-level BPE (Radford et al. 2019, "Language Models are Unsupervised Multitask
Learners"; `train_tokenizer(model="bpe")`): GPT-2's regex splits the text into words, numbers
and punctuation, each keeping the space before it; every byte becomes one of 256 printable
symbols ("Ġ" is the space), so no text is unknown; BPE merges the most frequent pairs of
symbols. No normalisation: case and accents are kept. Its one special token <|endoftext|> is
bos, eos and unk at once, and nothing is added around a text; a pre-training corpus puts it
between documents (`start_token_id`, `end_token_id`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import tokenizers
import torch
from tokenizers import decoders, normalizers, pre_tokenizers, trainers
from tokenizers.models import BPE, Unigram, WordPiece

from ..errors import UserError
from .corpus import ReadStats, corpus_lines, text_files
from .tokenizer_files import (
    END_OF_TEXT,
    GENERIC_CLASS,
    ROLES,
    BertVocabulary,
    TokenizerFiles,
    add_special_tokens,
    byte_level,
    check_vocab,
    post_processor,
    read_tokenizer,
    write_tokenizer,
)

PAD, UNK, CLS, SEP, MASK = SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
BERT_SPECIAL_TOKENS = {"pad": PAD, "unk": UNK, "cls": CLS, "sep": SEP, "mask": MASK}  # role -> BERT's token
TOKENIZER_MODELS = ("wordpiece", "unigram", "bpe")  # what `train_tokenizer` learns
SENTINEL = re.compile(r"<extra_id_(\d+)>")  # T5's sentinel tokens, numbered from 0


# Longer words become [UNK] whole. Google's tokenization.py allows 200 characters; we follow
# transformers (BertTokenizer and BertTokenizerFast) and the `tokenizers` engine, which allow
# 100, because every Hub checkpoint is used through them and our ids must equal theirs (the
# parity tests hold us to it). Only words of 101-200 characters differ, after the split at
# whitespace and punctuation: long numbers, hashes, chemical names.
MAX_INPUT_CHARS_PER_WORD = 100


DEFAULT_MODEL_MAX_LENGTH = 512  # BERT's position table


GPT2_MODEL_MAX_LENGTH = 1024  # GPT-2's context, as its tokenizer_config.json says


# The special tokens plus room for a basic alphabet; training also checks the corpus's own.
MIN_VOCAB_SIZE = 128


BYTE_LEVEL_ALPHABET = 256  # a byte-level BPE starts from one symbol per byte


_TRAIN_BATCH_LINES = 1000  # lines handed to the Rust trainer per call: amortises Python overhead


_CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))  # transformers' clean_up_tokenization, in order


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
    """A tokenizer of any of the four kinds, with its special tokens by role.

    Built here from a vocabulary (BERT's WordPiece, or a unigram vocabulary given `scores`), or
    read from a tokenizer directory (`from_pretrained`). WordPiece splits each word greedily into
    the longest pieces found in the vocabulary, pieces after the first carrying the "##" prefix.
    For example, with a vocabulary holding "un", "##aff" and "##able":

        >>> tokenizer.tokenize("unaffable")
        ['un', '##aff', '##able']

    Args:
        vocab: the tokens in id order (line i of vocab.txt is id i). Must hold every special
            token, each once.
        scores: a unigram vocabulary: each token's log probability, in the same order
            (None: WordPiece).
        do_lower_case: lowercase the text (uncased models).
        strip_accents: drop accents; None follows `do_lower_case`, as in BERT.
        tokenize_chinese_chars: put spaces around CJK ideographs, so each is its own word.
        keep_hangul: recompose Hangul syllables after accent stripping (see the module
            docstring); False reproduces BERT exactly.
        model_max_length: the default `max_length` for encoding.
        special_tokens: role -> token; default BERT's `[PAD] [UNK] [CLS] [SEP] [MASK]`. The
            text is framed "cls A sep" and "cls A sep B sep".
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
        special_tokens: dict[str, str] | None = None,
    ):
        special_tokens = dict(BERT_SPECIAL_TOKENS if special_tokens is None else special_tokens)
        check_vocab(vocab, "vocabulary", list(special_tokens.values()))
        special_tokens = {role: special_tokens[role] for role in ROLES if role in special_tokens}
        if scores is not None and len(scores) != len(vocab):
            raise UserError(f"a unigram vocabulary needs one score per token: {len(vocab)} tokens, {len(scores)} scores")
        self._options = {"do_lower_case": do_lower_case, "strip_accents": strip_accents,
                         "tokenize_chinese_chars": tokenize_chinese_chars, "keep_hangul": keep_hangul}
        self._scores = None if scores is None else [float(score) for score in scores]
        self.model_max_length = model_max_length
        numbered = {int(m.group(1)): token for token in vocab if (m := SENTINEL.fullmatch(token))}
        # transformers 5's BertTokenizer rebuilds its normalizer from the config keys and
        # would drop the NFC step of keep_hangul; the generic class runs tokenizer.json as is.
        generic = self._recomposes_hangul or scores is not None
        files = TokenizerFiles(kind="wordpiece" if scores is None else "unigram",
                               tokenizer_class=GENERIC_CLASS if generic else "BertTokenizer",
                               special_tokens=special_tokens, extra_special_tokens=[numbered[n] for n in sorted(numbered)],
                               model_max_length=model_max_length)
        self._setup(self._build_engine(list(vocab), files), files)

    def _build_engine(self, vocab: list[str], files: TokenizerFiles) -> tokenizers.Tokenizer:
        normalizer = _normalizer(
            do_lower_case=self.do_lower_case,
            strip_accents=self.strip_accents,
            tokenize_chinese_chars=self.tokenize_chinese_chars,
            recompose_hangul=self._recomposes_hangul,
        )
        ids = {token: i for i, token in enumerate(vocab)}
        unk = files.special_tokens["unk"]
        if self._scores is None:
            engine = tokenizers.Tokenizer(
                WordPiece(ids, unk_token=unk, continuing_subword_prefix="##",
                          max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD)
            )
            engine.normalizer = normalizer
            engine.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            engine.decoder = decoders.WordPiece(prefix="##")
        else:
            engine = tokenizers.Tokenizer(Unigram(list(zip(vocab, self._scores)), unk_id=ids[unk]))
            # NFKC first: it can make capitals ("№" -> "No") that lowercasing must then see.
            engine.normalizer = _unigram_normalizer(normalizer)
            engine.pre_tokenizer = pre_tokenizers.Metaspace()
            engine.decoder = decoders.Metaspace()
        # Already in the vocab: they keep their ids, and the text is never split inside them.
        add_special_tokens(engine, [], files)
        engine.post_processor = post_processor("BertTokenizer", files.special_tokens, engine, {})
        return engine

    def _setup(self, engine: tokenizers.Tokenizer, files: TokenizerFiles) -> None:
        """Hold `engine` (the whole pipeline; padding and truncation are set per call) and `files`."""
        self._engine = engine
        self.files = files
        self._tokens = [engine.id_to_token(i) or "" for i in range(engine.get_vocab_size(with_added_tokens=True))]
        self._ids = {token: i for i, token in enumerate(self._tokens)}
        numbered = {int(m.group(1)): i for i, token in enumerate(self._tokens) if (m := SENTINEL.fullmatch(token))}
        self._sentinel_ids = [numbered[n] for n in sorted(numbered)]
        self._role_ids = {role: self._ids[token] for role, token in files.special_tokens.items()}
        flagged = [index for index, token in engine.get_added_tokens_decoder().items() if token.special]
        self._special_ids = frozenset([*self._role_ids.values(), *flagged,
                                       *(self._ids[token] for token in files.extra_special_tokens)])
        self._frames: dict[str, list[tuple[int | str, int]]] = {}  # see `_framing`

    @property
    def _recomposes_hangul(self) -> bool:
        """Whether `keep_hangul` has work to do: only accent stripping decomposes Hangul."""
        strips_accents = self.do_lower_case if self.strip_accents is None else self.strip_accents
        return bool(self.keep_hangul and strips_accents)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> Tokenizer:
        """Load the tokenizer of a folder as transformers or bertology wrote it.

        A BERT-class folder (vocab.txt, or a WordPiece tokenizer.json with BertTokenizer,
        ElectraTokenizer or DistilBertTokenizer as its class) is rebuilt from its vocabulary and
        the options of its config, as transformers 5 does; a folder without a config gets BERT
        uncased defaults. Any other is run as its tokenizer.json says, or as its class builds it
        from vocab.json + merges.txt or spiece.model (data/tokenizer_files.py). Padding and
        truncation stored in a tokenizer.json are ignored: they would silently change the output.

        Args:
            directory: a tokenizer folder (a model directory holds one).

        Raises:
            UserError: no tokenizer files, or broken ones (the message names the file).
        """
        found, files = read_tokenizer(directory)
        if isinstance(found, BertVocabulary):
            options = {"model_max_length": files.model_max_length or DEFAULT_MODEL_MAX_LENGTH, **found.options}
            tokenizer = cls(found.tokens, scores=found.scores, special_tokens=files.special_tokens, **options)
            add_special_tokens(tokenizer._engine, found.added_tokens, files)
            generic = tokenizer.tokenizer_class == GENERIC_CLASS  # keep_hangul's NFC needs it
            tokenizer._setup(tokenizer._engine, dataclasses.replace(
                files, model_max_length=tokenizer.model_max_length,
                tokenizer_class=GENERIC_CLASS if generic else files.tokenizer_class))
            return tokenizer
        return cls._from_pipeline(found, files)

    @classmethod
    def _from_pipeline(cls, engine: tokenizers.Tokenizer, files: TokenizerFiles) -> Tokenizer:
        """A tokenizer that runs `engine` as it is (not rebuilt from BERT options)."""
        tokenizer = cls.__new__(cls)
        lower = files.config.get("do_lower_case")
        tokenizer._options = None
        tokenizer._lower_case = lower if isinstance(lower, bool) else None
        tokenizer._scores = None
        tokenizer.model_max_length = files.model_max_length or DEFAULT_MODEL_MAX_LENGTH
        tokenizer._setup(engine, files)
        if isinstance(engine.model, Unigram):
            tokenizer._scores = [score for _, score in json.loads(engine.to_str())["model"]["vocab"]]
        return tokenizer

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json, and the kind's
        own files: vocab.txt (WordPiece, and bertology's unigram), vocab.json + merges.txt (BPE),
        spiece.model (when one was read). transformers' AutoTokenizer loads the folder and
        tokenizes identically; so does `from_pretrained`.

        Args:
            directory: the output folder, created if needed.
        """
        # Padding and truncation are per-call engine settings; they must not be saved.
        self._engine.no_padding()
        self._engine.no_truncation()
        no_limit = self.files.model_max_length is None and self.model_max_length == DEFAULT_MODEL_MAX_LENGTH
        files = dataclasses.replace(self.files, model_max_length=None if no_limit else self.model_max_length)
        write_tokenizer(directory, self._engine, files, self._options_to_save())

    def _options_to_save(self) -> dict:
        """tokenizer_config.json keys of a tokenizer built from BERT options (none for others)."""
        if self._options is None:
            return {}
        generic = self.tokenizer_class == GENERIC_CLASS
        # The generic class would otherwise leave token_type_ids out, losing segment B.
        input_names = {"model_input_names": ["input_ids", "token_type_ids", "attention_mask"]} if generic else {}
        return {"tokenizer_model": self.model, **self._options, **input_names}

    # --- what the tokenizer is -------------------------------------------------------------------

    @property
    def kind(self) -> str:
        """"wordpiece", "bpe", "unigram" or "sentencepiece" (see the module docstring)."""
        return self.files.kind

    @property
    def model(self) -> str:
        """The engine's algorithm: "wordpiece", "bpe" or "unigram" (a SentencePiece model is one of the last two)."""
        return {"WordPiece": "wordpiece", "Unigram": "unigram"}.get(type(self._engine.model).__name__, "bpe")

    @property
    def tokenizer_class(self) -> str:
        """The transformers tokenizer class its config names (BertTokenizer, GPT2Tokenizer, ...)."""
        return self.files.tokenizer_class

    @property
    def padding_side(self) -> str:
        """"right", or "left" (XLNet's)."""
        return self.files.padding_side

    @property
    def scores(self) -> list[float] | None:
        """A unigram vocabulary's log probabilities, in id order (None for WordPiece and BPE)."""
        return self._scores

    @property
    def do_lower_case(self) -> bool | None:
        """Whether text is lowercased (None: a tokenizer.json whose config does not say)."""
        return self._options["do_lower_case"] if self._options is not None else self._lower_case

    @property
    def strip_accents(self) -> bool | None:
        return self._options["strip_accents"] if self._options is not None else None

    @property
    def tokenize_chinese_chars(self) -> bool | None:
        return self._options["tokenize_chinese_chars"] if self._options is not None else None

    @property
    def keep_hangul(self) -> bool:
        return self._options is not None and self._options["keep_hangul"]

    @property
    def fingerprint(self) -> str:
        """A hash of the whole pipeline (vocabulary, normalisation, special tokens): equal
        fingerprints give equal ids. Padding and truncation settings are left out."""
        pipeline = json.loads(self._engine.to_str())
        pipeline["padding"] = pipeline["truncation"] = None
        return hashlib.sha256(json.dumps(pipeline, sort_keys=True).encode("utf-8")).hexdigest()

    # --- special tokens by role ----------------------------------------------------------------------

    @property
    def special_tokens(self) -> dict[str, str]:
        """Role ("bos", "eos", "unk", "sep", "pad", "cls", "mask") -> token, for the roles it has."""
        return dict(self.files.special_tokens)

    def special_token_id(self, role: str) -> int:
        """The id of the token of `role` (one of `ROLES`).

        Raises:
            UserError: the tokenizer has no token of that role (GPT-2's has no pad, cls, sep or mask).
        """
        if role not in ROLES:
            raise ValueError(f"unknown special token role {role!r}; roles are {', '.join(ROLES)}")
        if role not in self._role_ids:
            have = ", ".join(f"{r} {t}" for r, t in self.files.special_tokens.items()) or "none"
            raise UserError(f"this {self.kind} tokenizer ({self.tokenizer_class}) has no {role} token (its special "
                            f"tokens: {have}); use a tokenizer that has one")
        return self._role_ids[role]

    @property
    def pad_token_id(self) -> int:
        """The id rows are padded with: the pad token, or for a tokenizer without one (GPT-2's) the
        eos token, as GPT-2 is usually padded; the attention mask hides padding either way."""
        return self.special_token_id("pad" if "pad" in self._role_ids or "eos" not in self._role_ids else "eos")

    @property
    def unk_token_id(self) -> int:
        return self.special_token_id("unk")

    @property
    def cls_token_id(self) -> int:
        return self.special_token_id("cls")

    @property
    def sep_token_id(self) -> int:
        return self.special_token_id("sep")

    @property
    def mask_token_id(self) -> int:
        return self.special_token_id("mask")

    @property
    def bos_token_id(self) -> int:
        return self.special_token_id("bos")

    @property
    def eos_token_id(self) -> int:
        return self.special_token_id("eos")

    @property
    def start_token_id(self) -> int:
        """The id that opens a text in pre-training sequences and prompts: BERT's [CLS], or for a
        tokenizer without one its bos (GPT-2's <|endoftext|>)."""
        return self.special_token_id("cls" if "cls" in self._role_ids else "bos")

    @property
    def end_token_id(self) -> int:
        """The id that ends a text (and parts two texts or documents): BERT's [SEP], or for a
        tokenizer without one its eos (GPT-2's <|endoftext|>, the separator of its training documents)."""
        return self.special_token_id("sep" if "sep" in self._role_ids else "eos")

    @property
    def special_token_ids(self) -> frozenset[int]:
        """The ids of the role tokens, the additional special tokens (sentinels included) and
        every added token marked special: never masked or predicted in pre-training."""
        return self._special_ids

    @property
    def sentinel_token_ids(self) -> list[int]:
        """The ids of <extra_id_0>, <extra_id_1>, ... in that order ([] when the vocabulary has none)."""
        return list(self._sentinel_ids)

    # --- framing ---------------------------------------------------------------------------------------

    def frame(self, ids: Sequence[int], pair: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
        """Token ids of a text (and of a second one) framed as the tokenizer frames texts it encodes:
        BERT's "[CLS] A [SEP] B [SEP]", RoBERTa's "<s> A </s></s> B </s>", GPT-2's "A B", T5's
        "A </s> B </s>", XLNet's "A <sep> B <sep> <cls>". For inputs assembled from ids (tasks, data).

        Returns:
            (input_ids, token_type_ids), of length len(ids) + len(pair) + the special tokens.
        """
        template = self._framing(pair is not None)
        input_ids, token_type_ids = [], []
        for part, type_id in template:
            piece = ids if part == "A" else pair if part == "B" else [part]
            input_ids += piece
            token_type_ids += [type_id] * len(piece)
        return input_ids, token_type_ids

    def _framing(self, is_pair: bool) -> list[tuple[int | str, int]]:
        """The frame of a text (or pair) as (special token id or "A"/"B", token type) parts, read off
        the engine's own output for stand-in texts, whatever its post-processor."""
        key = "pair" if is_pair else "single"
        if key not in self._frames:
            (encoding,) = self._encode([("a", "b") if is_pair else "a"], max_length=None, padding=False,
                                       truncation=False)
            parts: list[tuple[int | str, int]] = []
            for token_id, sequence, type_id in zip(encoding.ids, encoding.sequence_ids, encoding.type_ids):
                part = token_id if sequence is None else "AB"[sequence]
                if sequence is None or not parts or parts[-1][0] != part:
                    parts.append((part, type_id))
            self._frames[key] = parts
        return self._frames[key]

    # --- encoding and decoding -------------------------------------------------------------------------

    def __call__(
        self,
        texts: str | Sequence[str],
        text_pairs: str | Sequence[str] | None = None,
        max_length: int | None = None,
        padding: bool | str = True,
        truncation: bool = True,
        return_tensors: str | None = "pt",
        return_offsets_mapping: bool = False,
        add_special_tokens: bool = True,
    ) -> BatchEncoding:
        """Encode a batch of texts (or text pairs) into model inputs.

        Args:
            texts: one text or a list of texts (text A).
            text_pairs: optional text B for each text: "[CLS] A [SEP] B [SEP]" (each class's own framing).
            max_length: the longest row, special tokens included; default `model_max_length`.
            padding: True pads (see `pad_token_id`, on the `padding_side`) to the longest row of the
                batch, "max_length" to `max_length`, False not at all (rows then stay lists: ragged
                rows are no tensor).
            truncation: cut rows to `max_length`, taking tokens from the longer of A and B
                first ("longest_first").
            return_tensors: "pt" for torch LongTensors, None for lists.
            return_offsets_mapping: add `offset_mapping`, the (start, end) character span of
                each token in its own text; (0, 0) for special and padding tokens.
            add_special_tokens: frame the texts with the class's special tokens (False: the
                texts' own tokens, for rows framed later with `frame`).

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
        encodings = self._encode(batch, max_length=max_length, padding=padding, truncation=truncation,
                                 add_special_tokens=add_special_tokens)
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
            pad_id = self.pad_token_id
            self._engine.enable_padding(direction=self.padding_side, pad_id=pad_id, pad_token=self._tokens[pad_id],
                                        length=length)
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
            add_special_tokens: add the class's special tokens ([CLS] and [SEP] for BERT).
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
        """The tokens of `text` (WordPiece, BPE or unigram pieces), without special tokens or truncation."""
        (encoding,) = self._encode(
            [text], max_length=None, padding=False, truncation=False, add_special_tokens=False
        )
        return encoding.tokens

    def normalize(self, text: str) -> str:
        """`text` as the model sees it: cleaned, lowercased and accent-stripped as configured
        (unchanged for a tokenizer without normalisation, such as GPT-2's)."""
        normalizer = self._engine.normalizer
        return text if normalizer is None else normalizer.normalize_str(text)

    def decode(self, ids: Iterable[int] | torch.Tensor, skip_special_tokens: bool = True) -> str:
        """Turn ids back into text: "##" pieces are glued to the previous piece, "▁" and "Ġ" become spaces.

        Args:
            ids: token ids, a list or a 1-D tensor.
            skip_special_tokens: leave out [CLS], [SEP], [PAD] and the other special tokens.

        Returns:
            The text, normalized (lowercased for uncased models); for WordPiece with spaces
            between words and none before punctuation. When the config asks for it
            (`clean_up_tokenization_spaces`), the spaces before punctuation and contractions
            are dropped as transformers does (never for BPE, whose spaces are the text's).
        """
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        text = self._engine.decode(ids, skip_special_tokens=skip_special_tokens)
        if self.files.config.get("clean_up_tokenization_spaces") and self.model != "bpe":
            for before, after in _CLEAN_UP:
                text = text.replace(before, after)
        return text

    def convert_ids_to_tokens(self, ids: int | Iterable[int]) -> str | list[str]:
        """The token string of one id, or the list of token strings of several."""
        if isinstance(ids, int):
            return self._tokens[ids]
        return [self._tokens[i] for i in ids]

    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | list[int]:
        """The id of one token, or the ids of several; tokens outside the vocabulary map to the unk token."""
        if isinstance(tokens, str):
            return self._ids[tokens] if tokens in self._ids else self.unk_token_id
        return [self._ids[token] if token in self._ids else self.unk_token_id for token in tokens]

    @property
    def vocab_size(self) -> int:
        """The number of tokens in the vocabulary (the embedding table's rows)."""
        return len(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def __repr__(self) -> str:
        options = "".join(f", {key}={value}" for key, value in (self._options or {}).items())
        return (f"Tokenizer(kind={self.kind}, class={self.tokenizer_class}, vocab_size={self.vocab_size}, "
                f"special_tokens={self.files.special_tokens}{options})")


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
    """Learn a new WordPiece, unigram or byte-level BPE vocabulary from a corpus (text, JSONL or
    Parquet, maybe compressed).

    WordPiece: text is normalized and pre-tokenized as BERT does (uncased: lowercase, strip
    accents, with `keep_hangul=True`), then the `tokenizers` WordPieceTrainer learns the
    vocabulary. Files are streamed line by line (see `corpus_lines`), so the corpus need not
    fit in memory; they are read twice, the first time to fix the alphabet so that training is
    deterministic. BPE: GPT-2's byte-level BPE (see the module docstring), always cased.

    Args:
        files: corpus files and/or folders (see `text_files`).
        vocab_size: the vocabulary size, special tokens included.
        cased: keep case and accents (BERT "cased"); the default is uncased. A byte-level BPE
            is always cased, as GPT-2's.
        out_dir: if given, save the tokenizer there (see `Tokenizer.save_pretrained`).
        min_frequency: the fewest occurrences for a merged piece to enter the vocabulary.
        limit_alphabet: keep at most this many distinct characters; rarer ones become [UNK]
            (a byte-level BPE has its 256 byte symbols instead).
        skip_bad_lines: skip lines that are not valid UTF-8 (or JSONL lines that are not
            JSON objects) instead of failing.
        text_field: the JSONL field or Parquet column holding the text.
        stats: if given, gets the number of files and of skipped lines (counted once,
            though the corpus is read twice).
        model: "wordpiece" (BERT's), "unigram" (SentencePiece's, T5's) or "bpe" (GPT-2's byte-level
            BPE); see the module docstring.
        sentinels: append this many sentinel tokens, <extra_id_{sentinels-1}> ... <extra_id_0>
            (T5: 100), counted in vocab_size.

    Returns:
        The tokenizer: WordPiece and unigram with [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4;
        BPE with <|endoftext|>=0 (its bos, eos and unk), saved as transformers saves GPT-2's.

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
    if model == "bpe":
        if vocab_size - sentinels <= BYTE_LEVEL_ALPHABET:
            raise UserError(f"vocab_size={vocab_size} is too small for a byte-level BPE: its {BYTE_LEVEL_ALPHABET} "
                            f"byte symbols and {END_OF_TEXT} alone take {BYTE_LEVEL_ALPHABET + 1}"
                            f"{f' besides the {sentinels} sentinels' if sentinels else ''}")
        engine = _learn_byte_level_bpe(_line_batches(paths, text_field, skip_bad_lines, stats),
                                       vocab_size - sentinels, min_frequency)
        files = TokenizerFiles(kind="bpe", tokenizer_class="GPT2Tokenizer",
                               special_tokens=dict.fromkeys(("bos", "eos", "unk"), END_OF_TEXT),
                               extra_special_tokens=sentinel_tokens[::-1], model_max_length=GPT2_MODEL_MAX_LENGTH,
                               config={"add_prefix_space": False, "errors": "replace"})
        engine.add_special_tokens(sentinel_tokens)
        engine.post_processor = post_processor(files.tokenizer_class, files.special_tokens, engine, files.config)
        tokenizer = Tokenizer._from_pipeline(engine, files)
        if out_dir is not None:
            tokenizer.save_pretrained(out_dir)
        return tokenizer
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


def _learn_byte_level_bpe(batches: Iterator[list[str]], vocab_size: int, min_frequency: int) -> tokenizers.Tokenizer:
    """GPT-2's byte-level BPE learned by the `tokenizers` BpeTrainer over the corpus's line `batches`:
    <|endoftext|> first, then the 256 byte symbols, then the merges in the order learned."""
    engine = tokenizers.Tokenizer(BPE())  # no unknown token: every byte has its symbol
    engine.pre_tokenizer = byte_level()
    engine.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[END_OF_TEXT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    engine.train_from_iterator(batches, trainer)
    return engine


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
