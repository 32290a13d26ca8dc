"""Tokenizer directories as transformers writes them: which file holds the tokenizer, what each
transformers tokenizer class adds to it, and writing the same files back.

A directory holds its tokenizer in one of four layouts (the first found wins, as in transformers):

- `tokenizer.json`: a whole `tokenizers` pipeline (any model: WordPiece, BPE, unigram), run as is;
- `vocab.json` + `merges.txt`: a BPE vocabulary and its merges, GPT-2's and RoBERTa's byte-level
  BPE (Radford et al. 2019) or the first GPT's ("</w>" ends a word; Radford et al. 2018);
- `spiece.model`: a SentencePiece model (Kudo & Richardson 2018), T5's, XLNet's and ALBERT's,
  read with the `sentencepiece` package and run as the `tokenizers` pipeline transformers 5
  builds from it;
- `vocab.txt`: BERT's WordPiece vocabulary (also ELECTRA's and DistilBERT's), one token a line.

Beside it, `tokenizer_config.json` names the transformers class (`tokenizer_class`), the special
tokens by role (bos eos unk sep pad cls mask, each may be absent or null), the additional special
tokens (T5's <extra_id_N>, XLNet's <eop> <eod>), lower-casing, the padding side and
`model_max_length`; `special_tokens_map.json` and `added_tokens.json` (older layouts) add to it.
Without a class name, a model directory's `config.json` `model_type` picks the class.

What a class decides beyond its files is the table `CLASSES` below: its default special tokens
and where padding goes; `POST_PROCESSING` gives the special tokens it puts around a text and a
pair (BERT "[CLS] A [SEP] B [SEP]", RoBERTa "<s> A </s></s> B </s>", GPT-2 nothing, T5
"A </s> B </s>", XLNet "A <sep> B <sep> <cls>"). The BERT classes are rebuilt from their
vocabulary and options (data/tokenizer.py), as transformers 5's BertTokenizer does; every other
class becomes one `tokenizers.Tokenizer` here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE, Unigram

from ..errors import UserError
from ..files import atomic_path, loads_json, write_json_atomic, write_text_atomic
from ..models import family_with_model_type

PIPELINE_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
ADDED_TOKENS_FILE = "added_tokens.json"
VOCAB_FILE = "vocab.txt"
BPE_VOCAB_FILE = "vocab.json"
MERGES_FILE = "merges.txt"
SENTENCEPIECE_FILE = "spiece.model"
MODEL_CONFIG_FILE = "config.json"  # a model directory's: its model_type names the tokenizer class

ROLES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")  # transformers' order: new tokens get ids in it
KINDS = ("wordpiece", "bpe", "unigram", "sentencepiece")
END_OF_TEXT = "<|endoftext|>"  # GPT-2's one special token: unknown, beginning and end of a text
SPACE = "▁"  # SentencePiece's mark of a word start (U+2581)

# transformers writes int(1e30) as model_max_length for "no limit"; treat anything this big so.
NO_LIMIT = 10**18


@dataclass(frozen=True)
class TokenizerClass:
    """What one transformers tokenizer class decides beyond its files."""

    kind: str
    defaults: dict[str, str]  # role -> the token the class uses when the config names none
    extra_defaults: tuple[str, ...] = ()  # additional special tokens it adds by default
    padding_side: str = "right"


_BERT = {"unk": "[UNK]", "sep": "[SEP]", "pad": "[PAD]", "cls": "[CLS]", "mask": "[MASK]"}
CLASSES = {
    "BertTokenizer": TokenizerClass("wordpiece", _BERT),
    "DistilBertTokenizer": TokenizerClass("wordpiece", _BERT),
    "ElectraTokenizer": TokenizerClass("wordpiece", _BERT),
    "GPT2Tokenizer": TokenizerClass("bpe", {"bos": END_OF_TEXT, "eos": END_OF_TEXT, "unk": END_OF_TEXT}),
    "RobertaTokenizer": TokenizerClass("bpe", {"bos": "<s>", "eos": "</s>", "sep": "</s>", "cls": "<s>",
                                               "unk": "<unk>", "pad": "<pad>", "mask": "<mask>"}),
    "OpenAIGPTTokenizer": TokenizerClass("bpe", {"unk": "<unk>"}),
    "T5Tokenizer": TokenizerClass("sentencepiece", {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}),
    "XLNetTokenizer": TokenizerClass("sentencepiece", {"bos": "<s>", "eos": "</s>", "unk": "<unk>", "sep": "<sep>",
                                                       "pad": "<pad>", "cls": "<cls>", "mask": "<mask>"},
                                     extra_defaults=("<eop>", "<eod>"), padding_side="left"),
    "AlbertTokenizer": TokenizerClass("sentencepiece", {"bos": "[CLS]", "eos": "[SEP]", "unk": "<unk>", "sep": "[SEP]",
                                                        "pad": "<pad>", "cls": "[CLS]", "mask": "[MASK]"}),
}
BERT_CLASSES = ("BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer")
GENERIC_CLASS = "PreTrainedTokenizerFast"  # transformers runs such a tokenizer.json as is
# The special tokens each class puts around text A and the pair A B: role names stand for the
# class's tokens; ":1" (":2") gives a token type other than 0. RoBERTa's is `RobertaProcessing`,
# the same tokens with offsets trimmed; a class not named adds nothing (or bos/eos when its
# config sets add_bos_token/add_eos_token).
POST_PROCESSING = {
    "BertTokenizer": ("cls $A sep", "cls $A sep $B:1 sep:1"),
    "AlbertTokenizer": ("cls $A sep", "cls $A sep $B:1 sep:1"),
    "T5Tokenizer": ("$A eos", "$A eos $B eos"),
    "XLNetTokenizer": ("$A sep cls:2", "$A sep $B:1 sep:1 cls:2"),
}
T5_EXTRA_IDS = 100  # T5's sentinels <extra_id_0> ... <extra_id_99>, appended after the SentencePiece pieces


@dataclass
class TokenizerFiles:
    """What a tokenizer directory says besides its pipeline, and what `write_tokenizer` puts back.

    `config` is tokenizer_config.json as read; the fields above it overwrite its keys on writing,
    and its other keys (transformers' own, such as `clean_up_tokenization_spaces`) go back unchanged.
    """

    kind: str
    tokenizer_class: str
    special_tokens: dict[str, str]  # role -> token, only the roles the tokenizer has
    extra_special_tokens: list[str] = field(default_factory=list)
    model_max_length: int | None = None  # None: no limit
    padding_side: str = "right"
    config: dict[str, Any] = field(default_factory=dict)
    sentencepiece_model: bytes | None = None  # spiece.model as read, written back unchanged


@dataclass
class BertVocabulary:
    """A BERT-class tokenizer (or bertology's own unigram one) to rebuild from its vocabulary."""

    tokens: list[str]
    scores: list[float] | None  # a unigram vocabulary's log probabilities; None for WordPiece
    options: dict[str, Any]  # do_lower_case, strip_accents, tokenize_chinese_chars, keep_hangul
    added_tokens: list[AddedToken]  # tokens past the vocabulary (ids len(tokens), len(tokens) + 1, ...)


def has_tokenizer(directory: str | os.PathLike) -> bool:
    """Whether `directory` holds a tokenizer in one of the four layouts."""
    directory = Path(directory)
    return any((directory / name).is_file() for name in (PIPELINE_FILE, BPE_VOCAB_FILE, SENTENCEPIECE_FILE,
                                                         VOCAB_FILE))


def read_tokenizer(directory: str | os.PathLike) -> tuple[tokenizers.Tokenizer | BertVocabulary, TokenizerFiles]:
    """Read a tokenizer directory (see the module docstring for the layouts and their order).

    Returns:
        (pipeline, files): the `tokenizers` pipeline, without padding or truncation, with every
        special token matched in raw text; or, for the BERT classes and bertology's own
        vocabularies, a `BertVocabulary` to build it from. `files` holds the rest.

    Raises:
        UserError: no tokenizer file, or one that is missing a partner, malformed or
            inconsistent; a one-line message naming the file.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"{directory}: tokenizer folder not found")
    config = read_json_object(directory / CONFIG_FILE) if (directory / CONFIG_FILE).is_file() else {}
    if (directory / SPECIAL_TOKENS_FILE).is_file():  # older layouts: its entries win over the config's
        config = {**config, **read_json_object(directory / SPECIAL_TOKENS_FILE)}
    # Written by bertology before transformers' layouts were read; a WordPiece one resaved by transformers
    # keeps the key but no vocab.txt, and is read as the BERT tokenizer its tokenizer.json holds.
    if "tokenizer_model" in config and (config["tokenizer_model"] != "wordpiece" or (directory / VOCAB_FILE).is_file()
                                        or not (directory / PIPELINE_FILE).is_file()):
        return _bertology_vocabulary(directory, config)
    class_name = _class_name(directory, config)
    paths = {name: directory / name for name in (PIPELINE_FILE, BPE_VOCAB_FILE, SENTENCEPIECE_FILE, VOCAB_FILE)}
    if class_name in BERT_CLASSES or (class_name is None and paths[VOCAB_FILE].is_file()
                                      and not paths[PIPELINE_FILE].is_file()):
        return _bert_vocabulary(directory, config, class_name or "BertTokenizer")
    added = _configured_added_tokens(directory, config)
    spm_bytes = None
    if paths[PIPELINE_FILE].is_file():
        engine = read_pipeline(paths[PIPELINE_FILE])
        kind = CLASSES[class_name].kind if class_name in CLASSES else _kind_of_model(engine)
    elif paths[BPE_VOCAB_FILE].is_file():
        engine, class_name = _bpe_pipeline(directory, config, class_name)
        kind = "bpe"
    elif paths[SENTENCEPIECE_FILE].is_file():
        spm_bytes = paths[SENTENCEPIECE_FILE].read_bytes()
        engine, added = _sentencepiece_pipeline(paths[SENTENCEPIECE_FILE], spm_bytes, config, class_name, added)
        kind = "sentencepiece"
    else:
        raise UserError(f"{directory}: no tokenizer here (expected {PIPELINE_FILE}, {BPE_VOCAB_FILE} + {MERGES_FILE}, "
                        f"{SENTENCEPIECE_FILE} or {VOCAB_FILE})")
    known = CLASSES.get(class_name)
    files = _files(directory / CONFIG_FILE, config, kind, class_name or GENERIC_CLASS, known)
    files.sentencepiece_model = spm_bytes
    add_special_tokens(engine, added, files)
    if not paths[PIPELINE_FILE].is_file():  # a tokenizer.json has its own
        engine.post_processor = post_processor(class_name, files.special_tokens, engine, config)
    return engine, files


def _class_name(directory: Path, config: dict) -> str | None:
    """The transformers class named by the config (without "Fast"), else by config.json's model_type."""
    name = config.get("tokenizer_class")
    if name is not None and not isinstance(name, str):
        raise UserError(f"{directory / CONFIG_FILE}: field 'tokenizer_class' must be a class name, got {name!r}")
    if name is None and (directory / MODEL_CONFIG_FILE).is_file():
        try:
            model_type = loads_json((directory / MODEL_CONFIG_FILE).read_bytes()).get("model_type")
        except (json.JSONDecodeError, AttributeError):
            model_type = None  # the model's loader reports a broken config.json
        name = _class_of_model_type(model_type)
    return name.removesuffix("Fast") if name else None


def _class_of_model_type(model_type: Any) -> str | None:
    """The tokenizer class transformers' AutoTokenizer picks for a config.json's model_type, as the
    model's family declares it (its spec's `tokenizer_classes`); None for a model_type no family reads."""
    try:
        family = family_with_model_type(model_type)
    except UserError:
        return None
    return family.spec.tokenizer_classes.get(model_type)


def _kind_of_model(engine: tokenizers.Tokenizer) -> str:
    """"wordpiece", "bpe" or "unigram", after the pipeline's model (unknown classes)."""
    return {"WordPiece": "wordpiece", "BPE": "bpe", "Unigram": "unigram"}.get(type(engine.model).__name__, "bpe")


def _files(config_path: Path, config: dict, kind: str, class_name: str, known: TokenizerClass | None) -> TokenizerFiles:
    """The roles, additional special tokens, padding and length limit of the config, over the class's defaults."""
    defaults = known.defaults if known else {}
    special_tokens = {}
    for role in ROLES:
        key = f"{role}_token"
        value = config[key] if key in config else defaults.get(role)
        if value is not None:
            special_tokens[role] = _token_content(value, config_path, key)
    extras = [_token_content(value, config_path, "extra_special_tokens") for value in _listed_extras(config)]
    if not extras and known:
        extras = list(known.extra_defaults)
    padding_side = config.get("padding_side", known.padding_side if known else "right")
    if padding_side not in ("left", "right"):
        raise UserError(f"{config_path}: field 'padding_side' must be \"left\" or \"right\", got {padding_side!r}")
    limit = config.get("model_max_length")
    if limit is not None and (type(limit) not in (int, float) or limit < 1):
        raise UserError(f"{config_path}: field 'model_max_length' must be a positive integer, got {limit!r}")
    return TokenizerFiles(kind=kind, tokenizer_class=class_name, special_tokens=special_tokens,
                          extra_special_tokens=list(dict.fromkeys(extras)),
                          model_max_length=None if limit is None or limit >= NO_LIMIT else int(limit),
                          padding_side=padding_side, config=config)


def _listed_extras(config: dict) -> list:
    """The additional special tokens of a config: transformers 5's `extra_special_tokens` (a list,
    or a dict of named ones) or, in older files, `additional_special_tokens`."""
    extras = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    return list(extras.values()) if isinstance(extras, dict) else list(extras)


def _token_content(value, path: Path, key: str) -> str:
    """A special token's text: a string, or transformers' serialized AddedToken ({"content": ...})."""
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    if isinstance(value, str) and value:
        return value
    raise UserError(f"{path}: field {key!r} must be a token (a string or an object with \"content\"), got {value!r}")


def _configured_added_tokens(directory: Path, config: dict) -> list[AddedToken]:
    """Added tokens the config's `added_tokens_decoder` or an older `added_tokens.json` lists, in id order."""
    path = directory / CONFIG_FILE
    decoder = config.get("added_tokens_decoder") or {}
    if not isinstance(decoder, dict):
        raise UserError(f"{path}: field 'added_tokens_decoder' must map ids to tokens")
    found = {}
    for index, token in decoder.items():
        try:
            found[int(index)] = AddedToken(**{k: v for k, v in token.items() if k != "__type"})
        except (TypeError, ValueError, AttributeError):
            raise UserError(f"{path}: field 'added_tokens_decoder' entry {index!r} is not an added token") from None
    if (directory / ADDED_TOKENS_FILE).is_file():
        listed = read_json_object(directory / ADDED_TOKENS_FILE)
        if not all(isinstance(index, int) for index in listed.values()):
            raise UserError(f"{directory / ADDED_TOKENS_FILE}: expected an object of token: id")
        for token, index in listed.items():
            found.setdefault(index, AddedToken(token, normalized=False))
    return [found[index] for index in sorted(found)]


def add_special_tokens(engine: tokenizers.Tokenizer, added: Sequence[AddedToken], files: TokenizerFiles) -> None:
    """Make the configured added tokens, the role tokens and the additional special tokens added
    tokens of `engine`, matched in raw text and never split, as transformers does on loading;
    one the vocabulary lacks gets the next free id, in that order."""
    present = {token.content for token in engine.get_added_tokens_decoder().values()}
    wanted = list(added) + [AddedToken(token, special=True, normalized=False)
                            for token in [*files.special_tokens.values(), *files.extra_special_tokens]]
    new = []
    for token in wanted:
        if token.content not in present:
            present.add(token.content)
            new.append(token)
    if new:
        engine.add_tokens(new)


def post_processor(class_name: str | None, special_tokens: dict[str, str], engine: tokenizers.Tokenizer,
                   config: dict) -> processors.PostProcessor:
    """The special tokens class `class_name` adds around a text and a pair (see `POST_PROCESSING`)."""
    def token_id(role: str) -> int:
        if role not in special_tokens:
            raise UserError(f"{class_name} puts a {role} token around every text, but the tokenizer has none")
        return engine.token_to_id(special_tokens[role])  # present: `add_special_tokens` came first

    if class_name == "RobertaTokenizer":
        return processors.RobertaProcessing((special_tokens["sep"], token_id("sep")),
                                            (special_tokens["cls"], token_id("cls")),
                                            trim_offsets=config.get("trim_offsets", True),
                                            add_prefix_space=config.get("add_prefix_space", False))
    if class_name in POST_PROCESSING:
        single, pair = POST_PROCESSING[class_name]
    else:  # what transformers 5 gives a class that adds nothing, unless its config asks for bos or eos
        bos = ["bos"] if config.get("add_bos_token") else []
        eos = ["eos"] if config.get("add_eos_token") else []
        single = " ".join([*bos, "$A", *eos])
        pair = " ".join([*bos, "$A", *eos, *(f"{role}:1" for role in bos), "$B:1", *(f"{role}:1" for role in eos)])
    spelled, used = {}, {}
    for template, name in ((single, "single"), (pair, "pair")):
        parts = []
        for part in template.split():
            role, _, type_id = part.partition(":")
            if role in ROLES:
                used[role] = token_id(role)
                part = f"{special_tokens[role]}:{type_id or 0}"
            parts.append(part)
        spelled[name] = " ".join(parts)
    return processors.TemplateProcessing(**spelled, special_tokens=[(special_tokens[role], index)
                                                                    for role, index in used.items()])


# --- tokenizer.json --------------------------------------------------------------------------------


def read_pipeline(path: Path) -> tokenizers.Tokenizer:
    """A tokenizer.json as the `tokenizers` engine reads it, its padding and truncation removed
    (they are per-call settings here: a shipped file's would silently change every output).

    Raises:
        UserError: not UTF-8, not JSON, or not a pipeline the engine can run.
    """
    text = decode_utf8(path.read_bytes(), path)
    try:
        pipeline = loads_json(text)
    except json.JSONDecodeError as error:
        raise UserError(f"{path}:{error.lineno}: invalid JSON ({error.msg})") from None
    model = pipeline.get("model") if isinstance(pipeline, dict) else None
    if not isinstance(model, dict):
        raise UserError(f"{path}: not a tokenizer pipeline (expected a JSON object with a \"model\")")
    if model.get("type") == "BPE" and isinstance(model.get("vocab"), dict) and isinstance(model.get("merges"), list):
        # The engine aborts (a Rust panic) on a merge whose result is not in the vocabulary.
        merges = [merge.split(" ") if isinstance(merge, str) else merge for merge in model["merges"]]
        check_merges(model["vocab"], merges, path, f"{path.name}'s vocab", model.get("continuing_subword_prefix"))
    try:
        engine = tokenizers.Tokenizer.from_str(text)
    except Exception as error:
        raise UserError(f"{path}: not a tokenizer the `tokenizers` library can read ({_first_line(error)})") from None
    engine.no_padding()
    engine.no_truncation()
    return engine


def check_merges(vocab: dict[str, int], merges: list, path: Path, vocab_name: str, prefix: str | None) -> None:
    """Each merge must join two tokens of the vocabulary into a third; name the first that does not
    (counting merges from 1). `prefix` is the model's continuing-subword prefix, dropped from the
    second token when the two are joined (BPE's rule)."""
    for number, merge in enumerate(merges, start=1):
        if not (isinstance(merge, (list, tuple)) and len(merge) == 2 and all(isinstance(t, str) for t in merge)):
            raise UserError(f"{path}: merge {number} is not two tokens: {merge!r}")
        left, right = merge
        joined = left + (right[len(prefix):] if prefix and right.startswith(prefix) else right)
        missing = [token for token in (left, right, joined) if token not in vocab]
        if missing:
            raise UserError(f"{path}: merge {number} ({left} {right}) needs {missing[0]!r}, which {vocab_name} "
                            "lacks: the merges and the vocabulary do not belong together")


# --- vocab.json + merges.txt -------------------------------------------------------------------------


def _bpe_pipeline(directory: Path, config: dict, class_name: str | None) -> tuple[tokenizers.Tokenizer, str]:
    """GPT-2's or RoBERTa's byte-level BPE, or the first GPT's, from vocab.json and merges.txt, as the
    class builds it; without a class name, "</w>" word ends mark the first GPT's, else GPT-2's."""
    vocab_path, merges_path = directory / BPE_VOCAB_FILE, directory / MERGES_FILE
    vocab = read_json_object(vocab_path)
    if not vocab or not all(type(index) is int and index >= 0 for index in vocab.values()):
        raise UserError(f"{vocab_path}: expected a non-empty JSON object of token: id")
    if len(set(vocab.values())) != len(vocab):
        raise UserError(f"{vocab_path}: two tokens share an id")
    if not merges_path.is_file():
        raise UserError(f"{merges_path}: not found ({vocab_path.name} needs its merges)")
    merges = read_merges(merges_path)
    check_merges(vocab, merges, merges_path, vocab_path.name, None)
    if class_name is None:
        class_name = "OpenAIGPTTokenizer" if any(token.endswith("</w>") for token in vocab) else "GPT2Tokenizer"
    if class_name == "OpenAIGPTTokenizer":
        unk = _token_content(config.get("unk_token", "<unk>"), directory / CONFIG_FILE, "unk_token")
        engine = tokenizers.Tokenizer(BPE(vocab=vocab, merges=merges, unk_token=unk, end_of_word_suffix="</w>",
                                          fuse_unk=False))
        engine.normalizer = normalizers.BertNormalizer(lowercase=True)
        engine.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        engine.decoder = decoders.BPEDecoder(suffix="</w>")
    else:  # GPT-2, RoBERTa and any other byte-level BPE
        engine = tokenizers.Tokenizer(BPE(vocab=vocab, merges=merges, fuse_unk=False))
        engine.pre_tokenizer = byte_level(config.get("add_prefix_space", False))
        engine.decoder = decoders.ByteLevel()
    return engine, class_name


def byte_level(add_prefix_space: bool = False) -> pre_tokenizers.PreTokenizer:
    """GPT-2's pre-tokenizer: its regex splits words, numbers and punctuation (a space stays at the
    start of the word after it), then every byte becomes one of 256 printable characters ("Ġ" for
    the space), so any text is covered without an unknown token."""
    return pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)


def read_merges(path: Path) -> list[tuple[str, str]]:
    """merges.txt: a "#version" line (optional), then one merge a line, two tokens and a space between."""
    merges = []
    for number, line in enumerate(decode_utf8(path.read_bytes(), path).split("\n"), start=1):
        line = line.rstrip("\r")
        if not line or (number == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise UserError(f"{path}:{number}: expected two tokens separated by one space, got {line[:80]!r}")
        merges.append((parts[0], parts[1]))
    return merges


# --- spiece.model --------------------------------------------------------------------------------


def _sentencepiece_pipeline(path: Path, data: bytes, config: dict, class_name: str | None,
                            added: list[AddedToken]) -> tuple[tokenizers.Tokenizer, list[AddedToken]]:
    """The `tokenizers` pipeline transformers 5 builds from a SentencePiece model for T5, XLNet and
    ALBERT (another class, or none: SentencePiece's own settings), and the added tokens to give it:
    the model's control and user-defined pieces before the configured ones.

    One difference from transformers: the unknown piece is always the model's own (its
    trainer_spec.unk_id), where T5's and ALBERT's classes assume ids 2 and 1, which they are
    in every model trained for them."""
    proto = read_sentencepiece(path, data)
    charsmap = proto.normalizer_spec.precompiled_charsmap
    pieces = [(piece.piece, piece.score) for piece in proto.pieces]
    # control (3) and user-defined (4) pieces are matched in raw text; only control ones are special
    spm_tokens = [AddedToken(piece.piece, normalized=False, special=piece.type == 3)
                  for piece in proto.pieces if piece.type in (3, 4)]
    if class_name == "T5Tokenizer":
        extra_ids = config.get("extra_ids", T5_EXTRA_IDS)
        pieces += [(f"<extra_id_{n}>", 0.0) for n in reversed(range(extra_ids))]  # <extra_id_0> last
        engine = tokenizers.Tokenizer(Unigram(pieces, unk_id=proto.trainer_spec.unk_id, byte_fallback=False))
        if charsmap:
            engine.normalizer = normalizers.Precompiled(charsmap)
        engine.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(SPACE, prepend_scheme="always", split=True)])
        engine.decoder = decoders.Metaspace(SPACE, prepend_scheme="always", split=True)
        spm_tokens += [AddedToken(f"<extra_id_{n}>", normalized=False, special=True) for n in range(extra_ids)]
    elif class_name in ("XLNetTokenizer", "AlbertTokenizer"):
        engine = tokenizers.Tokenizer(Unigram(pieces, unk_id=proto.trainer_spec.unk_id, byte_fallback=False))
        steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
        # XLNet's class strips accents whatever its keep_accents says; ALBERT's follows it.
        if class_name == "XLNetTokenizer" or not config.get("keep_accents", False):
            steps += [normalizers.NFKD(), normalizers.StripAccents()]
        if config.get("do_lower_case", class_name == "AlbertTokenizer"):
            steps.append(normalizers.Lowercase())
        if charsmap:
            steps.append(normalizers.Precompiled(charsmap))
        engine.normalizer = normalizers.Sequence(steps)
        prepend = "always" if class_name == "XLNetTokenizer" or config.get("add_prefix_space", True) else "never"
        engine.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                        pre_tokenizers.Metaspace(SPACE, prepend_scheme=prepend)])
        engine.decoder = decoders.Metaspace(SPACE, prepend_scheme=prepend)
    else:
        engine = _sentencepiece_as_is(path, proto, pieces)
    return engine, spm_tokens + list(added)


def read_sentencepiece(path: Path, data: bytes):
    """The ModelProto of a SentencePiece model file, checked by `sentencepiece` itself first.

    Raises:
        UserError: not a SentencePiece model, or a truncated or corrupt one.
    """
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2

    try:
        sentencepiece.SentencePieceProcessor().LoadFromSerializedProto(data)
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(data)
    except Exception as error:
        raise UserError(f"{path}: not a SentencePiece model, or a truncated one ({_first_line(error)})") from None
    return proto


def _sentencepiece_as_is(path: Path, proto, pieces: list[tuple[str, float]]) -> tokenizers.Tokenizer:
    """A SentencePiece model under its own normaliser settings, as transformers 5 converts one that
    no class of its claims (unigram, or BPE with merges ranked by the pieces' scores)."""
    trainer, spec = proto.trainer_spec, proto.normalizer_spec
    if trainer.model_type == 1:
        engine = tokenizers.Tokenizer(Unigram(pieces, unk_id=trainer.unk_id, byte_fallback=trainer.byte_fallback))
    elif trainer.model_type == 2:
        vocab = {piece: index for index, (piece, _) in enumerate(pieces)}
        normal = {piece.piece: (piece.score, index) for index, piece in enumerate(proto.pieces) if piece.type == 1}
        ranked = sorted((-score, index, token[:cut], token[cut:]) for token, (score, index) in normal.items()
                        for cut in range(1, len(token)) if token[:cut] in normal and token[cut:] in normal)
        engine = tokenizers.Tokenizer(BPE(vocab=vocab, merges=[(left, right) for _, _, left, right in ranked],
                                          unk_token=trainer.unk_piece, fuse_unk=True,
                                          byte_fallback=trainer.byte_fallback))
    else:
        raise UserError(f"{path}: a SentencePiece {('word', 'char')[trainer.model_type - 3]} model; only unigram "
                        "and BPE models are read")
    steps = [normalizers.Precompiled(spec.precompiled_charsmap)] if spec.precompiled_charsmap else []
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex(r"\A +| +\z"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    if spec.escape_whitespaces:
        steps.append(normalizers.Replace(" ", SPACE))
    if spec.add_dummy_prefix:  # Metaspace would skip the prefix of a text already starting with "▁"
        steps.append(normalizers.Replace(Regex(rf"\A{SPACE}"), SPACE * 2))
    engine.normalizer = normalizers.Sequence(steps)
    if spec.add_dummy_prefix:
        engine.pre_tokenizer = pre_tokenizers.Metaspace(SPACE, prepend_scheme="always", split=False)
    parts = [decoders.Replace(SPACE, " ")] + ([decoders.ByteFallback()] if trainer.byte_fallback else [])
    if spec.add_dummy_prefix:
        parts += [decoders.Fuse(), decoders.Strip(content=" ", left=1)]
    elif trainer.byte_fallback:
        parts.append(decoders.Fuse())
    engine.decoder = decoders.Sequence(parts)
    return engine


# --- vocab.txt and bertology's own vocabularies -------------------------------------------------------


def _bert_vocabulary(directory: Path, config: dict, class_name: str) -> tuple[BertVocabulary, TokenizerFiles]:
    """A BERT-class tokenizer: its vocab.txt, or the WordPiece vocabulary of its tokenizer.json,
    and the options of its config (the pipeline is rebuilt from them, as transformers 5 does)."""
    files = _files(directory / CONFIG_FILE, config, "wordpiece", class_name, CLASSES[class_name])
    added: list[AddedToken] = []
    if (directory / VOCAB_FILE).is_file() or not (directory / PIPELINE_FILE).is_file():
        tokens = read_vocab(directory / VOCAB_FILE, _bert_order(files.special_tokens))
    else:
        engine = read_pipeline(directory / PIPELINE_FILE)
        if not isinstance(engine.model, tokenizers.models.WordPiece):
            raise UserError(f"{directory / PIPELINE_FILE}: {class_name} needs a WordPiece model, this one is "
                            f"{type(engine.model).__name__}")
        vocab = engine.get_vocab(with_added_tokens=False)
        tokens = sorted(vocab, key=vocab.get)
        check_vocab(tokens, str(directory / PIPELINE_FILE), _bert_order(files.special_tokens))
        added = [token for index, token in sorted(engine.get_added_tokens_decoder().items()) if index >= len(tokens)]
    options = bert_options(directory / CONFIG_FILE, config)
    options.pop("tokenizer_model", None)
    return BertVocabulary(tokens, None, options, added + _configured_added_tokens(directory, config)), files


def _bertology_vocabulary(directory: Path, config: dict) -> tuple[BertVocabulary, TokenizerFiles]:
    """A vocabulary written by bertology (its config says `tokenizer_model`): WordPiece in vocab.txt,
    or unigram pieces and scores in tokenizer.json; BERT's five special tokens."""
    options = bert_options(directory / CONFIG_FILE, config)
    model = options.pop("tokenizer_model")
    files = _files(directory / CONFIG_FILE, config, model, config.get("tokenizer_class", "BertTokenizer"),
                   CLASSES["BertTokenizer"])
    special_tokens = _bert_order(files.special_tokens)
    if model == "unigram":
        tokens, scores = _read_unigram(directory / PIPELINE_FILE, special_tokens)
        return BertVocabulary(tokens, scores, options, []), files
    return BertVocabulary(read_vocab(directory / VOCAB_FILE, special_tokens), None, options, []), files


def _bert_order(special_tokens: dict[str, str]) -> list[str]:
    """The role tokens in BERT's vocabulary order ([PAD] [UNK] [CLS] [SEP] [MASK]), then bos and eos."""
    order = ("pad", "unk", "cls", "sep", "mask", "bos", "eos")
    return [special_tokens[role] for role in order if role in special_tokens]


# The options of bertology's own tokenizers (and BERT's): key, allowed values in words, types.
BERT_OPTIONS = (
    ("do_lower_case", "true or false", (bool,)),
    ("strip_accents", "true, false or null", (bool, type(None))),
    ("tokenize_chinese_chars", "true or false", (bool,)),
    ("keep_hangul", "true or false", (bool,)),
    ("model_max_length", "a positive integer", (int,)),
    ("tokenizer_model", "wordpiece or unigram", (str,)),
)
BERTOLOGY_MODELS = ("wordpiece", "unigram")  # the values of `tokenizer_model`


def bert_options(path: Path, config: dict) -> dict:
    """The BERT Tokenizer options stored in a tokenizer_config.json (checked; absent ones left out).

    Keys that belong to transformers but not to these options (class name, special token
    spellings, ...) are ignored; "no limit" as model_max_length is left out too.
    """
    options = {}
    for key, allowed, kinds in BERT_OPTIONS:
        if key not in config:
            continue
        value = config[key]
        if (type(value) not in kinds or (key == "model_max_length" and value < 1)
                or (key == "tokenizer_model" and value not in BERTOLOGY_MODELS)):
            raise UserError(f"{path}: field {key!r} must be {allowed}, got {value!r}")
        options[key] = value
    if options.get("model_max_length", 0) >= NO_LIMIT:
        del options["model_max_length"]
    return options


def read_vocab(path: str | os.PathLike, special_tokens: Sequence[str] = tuple(_BERT.values())) -> list[str]:
    """Read a BERT vocab.txt: one token per line, line i (from 0) is id i.

    Raises:
        UserError: the file is missing, not UTF-8, empty, repeats a token or lacks a special token.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: vocabulary file not found (expected one token per line)")
    text = decode_utf8(path.read_bytes(), path)
    # Split on "\n" only, as transformers does: str.splitlines would also split inside tokens
    # holding characters such as U+2028 or U+0085.
    tokens = text.replace("\r\n", "\n").split("\n")
    if tokens[-1] == "":
        tokens.pop()
    check_vocab(tokens, str(path), special_tokens)
    return tokens


def _read_unigram(path: Path, special_tokens: Sequence[str]) -> tuple[list[str], list[float]]:
    """The pieces and scores of a unigram tokenizer.json (its model's "vocab": [[piece, score], ...])."""
    if not path.is_file():
        raise UserError(f"{path}: not found (a unigram tokenizer keeps its pieces and their scores there)")
    try:
        model = loads_json(decode_utf8(path.read_bytes(), path)).get("model", {})
        pieces = [(str(piece), float(score)) for piece, score in model["vocab"]] if model.get("type") == "Unigram" else None
    except json.JSONDecodeError as error:
        raise UserError(f"{path}:{error.lineno}: invalid JSON ({error.msg})") from None
    except (AttributeError, KeyError, TypeError, ValueError):
        pieces = None
    if not pieces:
        raise UserError(f"{path}: expected a Unigram model with a vocab of [piece, score] pairs")
    tokens = [piece for piece, _ in pieces]
    check_vocab(tokens, str(path), special_tokens)
    return tokens, [score for _, score in pieces]


def check_vocab(tokens: Sequence[str], source: str, special_tokens: Sequence[str]) -> None:
    """Raise UserError unless `tokens` is non-empty, has no repeats and holds every special token
    (named in the order given)."""
    if not tokens:
        raise UserError(f"{source}: the vocabulary is empty")
    first_line: dict[str, int] = {}
    for line, token in enumerate(tokens, start=1):
        if token in first_line:
            raise UserError(f"{source}:{line}: duplicate token {token!r} (first on line {first_line[token]})")
        first_line[token] = line
    missing = [token for token in special_tokens if token not in first_line]
    if missing:
        raise UserError(f"{source}: the vocabulary lacks the special tokens {' '.join(missing)}")


# --- writing -----------------------------------------------------------------------------------------


def write_tokenizer(directory: str | os.PathLike, engine: tokenizers.Tokenizer, files: TokenizerFiles,
                    options: dict[str, Any]) -> None:
    """Write the directory transformers' AutoTokenizer loads with the same ids: tokenizer.json,
    tokenizer_config.json and special_tokens_map.json, and the kind's own files (vocab.txt for
    WordPiece, vocab.json + merges.txt for BPE, spiece.model when one was read).

    Args:
        directory: the output folder, created if needed.
        engine: the pipeline, without padding or truncation.
        files: what goes into the config (see `TokenizerFiles`).
        options: further config keys (a BERT tokenizer's options), written over `files.config`.
    """
    directory = Path(directory)
    pipeline = json.loads(engine.to_str())
    model = pipeline["model"]
    if model["type"] == "WordPiece" or (files.kind == "unigram" and options.get("tokenizer_model")):
        tokens = [engine.id_to_token(i) for i in range(engine.get_vocab_size(with_added_tokens=False))]
        write_text_atomic(directory / VOCAB_FILE, "".join(token + "\n" for token in tokens))
    elif model["type"] == "BPE" and _writable_merges(model["merges"]):
        write_json_atomic(directory / BPE_VOCAB_FILE, model["vocab"])
        lines = [" ".join(merge) if isinstance(merge, list) else merge for merge in model["merges"]]
        write_text_atomic(directory / MERGES_FILE, "#version: 0.2\n" + "".join(line + "\n" for line in lines))
    if files.sentencepiece_model is not None:
        with atomic_path(directory / SENTENCEPIECE_FILE) as tmp:
            tmp.write_bytes(files.sentencepiece_model)
    write_json_atomic(directory / CONFIG_FILE, _config(files, options))
    special = {f"{role}_token": token for role, token in files.special_tokens.items()}
    if files.extra_special_tokens:
        special["additional_special_tokens"] = files.extra_special_tokens
    write_json_atomic(directory / SPECIAL_TOKENS_FILE, special)
    with atomic_path(directory / PIPELINE_FILE) as tmp:
        engine.save(str(tmp))


def _writable_merges(merges: list) -> bool:
    """Whether merges.txt can hold these merges (a token with a space cannot be written in it)."""
    return all(isinstance(merge, list) and " " not in "".join(merge) for merge in merges)


def _config(files: TokenizerFiles, options: dict[str, Any]) -> dict[str, Any]:
    """tokenizer_config.json: the one read, with this tokenizer's class, roles (null for an absent
    one, so that transformers does not put its class's default back), extras, padding and limit."""
    config = {key: value for key, value in files.config.items()
              if key not in ("added_tokens_decoder", "additional_special_tokens", "special_tokens_map_file")}
    config["tokenizer_class"] = files.tokenizer_class
    config.update({f"{role}_token": files.special_tokens.get(role) for role in ROLES})
    if files.extra_special_tokens:
        config["extra_special_tokens"] = list(files.extra_special_tokens)
    else:
        config.pop("extra_special_tokens", None)
    config["padding_side"] = files.padding_side
    config["model_max_length"] = int(1e30) if files.model_max_length is None else files.model_max_length
    config.update(options)
    return config


# --- shared readers ------------------------------------------------------------------------------------


def read_json_object(path: Path) -> dict:
    """A JSON file holding an object; a one-line error naming the file (and line) otherwise."""
    try:
        value = loads_json(decode_utf8(path.read_bytes(), path))
    except json.JSONDecodeError as error:
        raise UserError(f"{path}:{error.lineno}: invalid JSON ({error.msg})") from None
    if not isinstance(value, dict):
        raise UserError(f"{path}: expected a JSON object")
    return value


def decode_utf8(data: bytes, path: Path) -> str:
    """Decode the whole content `data` of `path`; name the bad line if it fails."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = 1 + data.count(b"\n", 0, error.start)
        raise UserError(f"{path}:{line}: not valid UTF-8 ({error.reason})") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
