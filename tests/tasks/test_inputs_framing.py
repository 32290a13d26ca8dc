"""Task rows framed by any tokenizer (tasks/inputs.py with `Tokenizer.frame`), and whole-word
masking's word starts (data/shards.py's `continuation_table`), for the nine model types'
tokenizers as transformers writes them (conftest.py's `transformers_tokenizers`).

Every row of every task kind is what transformers' own tokenizer builds for the same texts:
sentence pairs as `tokenizer(a, b)` (and, cut, as its longest-first truncation), windows and the
rows assembled from ids as its `build_inputs_with_special_tokens` and token types; each tagged
word's label sits on the first of its tokens, each SQuAD answer's span and each WiC target's
tokens spell the answer and the word."""

import dataclasses

import pytest
import transformers
from helpers import TOKENIZER_CLASSES

from bertology.data.shards import continuation_table
from bertology.data.tokenizer import Tokenizer
from bertology.errors import UserError
from bertology.ops import IGNORE_INDEX
from bertology.tasks.inputs import InputSettings, encode, framing
from bertology.tasks.readers import TASKS, read_examples

MODEL_TYPES = tuple(TOKENIZER_CLASSES)


@pytest.fixture(scope="module")
def examples(data_dir) -> dict[str, list]:
    """A few dozen examples of MRPC, CoNLL-2003, SQuAD 2.0 and WiC, in the shared data's official files."""
    return {"mrpc": read_examples(TASKS["mrpc"], data_dir / "glue/MRPC/dev.tsv", "dev")[:40],
            "conll2003": read_examples(TASKS["conll2003"], data_dir / "conll2003/valid.txt", "dev")[:60],
            "squad_v2": [e for e in read_examples(TASKS["squad_v2"], data_dir / "squad/train-v2.0.subset-first10articles.json",
                                                  "train") if e.answers and all(ord(c) < 128 for c in e.context)][:20],
            "wic": read_examples(TASKS["wic"], data_dir / "wic/dev.data.txt", "dev")[:40]}


def tokenizers(transformers_tokenizers, model_type: str) -> tuple[Tokenizer, transformers.PreTrainedTokenizerBase]:
    folder = transformers_tokenizers[model_type][1]
    return Tokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)


def spelled(tokenizer: Tokenizer, ids: list[int]) -> str:
    """Tokens decoded back to text without spaces (decoding puts them between words and punctuation)."""
    return tokenizer.decode(ids).replace(" ", "")


def normalized(tokenizer: Tokenizer, text: str) -> str:
    """The text as the tokenizer's normalisation leaves it, without spaces."""
    return tokenizer.normalize(text).replace(" ", "").replace("\u2581", "")


@pytest.mark.slow
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_sentence_pairs_cut_and_windowed_as_transformers_frames_them(transformers_tokenizers, examples, model_type):
    ours, theirs = tokenizers(transformers_tokenizers, model_type)
    pairs = examples["mrpc"]
    firsts, seconds = [e.text_a for e in pairs], [e.text_b for e in pairs]
    if "pad" not in ours.special_tokens:
        theirs.pad_token = theirs.eos_token or theirs.unk_token  # only to call it; nothing is padded here
    whole = encode(TASKS["mrpc"], pairs, ours, InputSettings(max_seq_len=512), training=False)
    expected = theirs(firsts, seconds, return_token_type_ids=True)
    assert [row.input_ids for row in whole.features] == expected["input_ids"]
    assert [row.token_type_ids for row in whole.features] == expected["token_type_ids"]
    cut = encode(TASKS["mrpc"], pairs, ours, InputSettings(max_seq_len=24), training=False)
    expected = theirs(firsts, seconds, truncation="longest_first", max_length=24, return_token_type_ids=True)
    assert cut.too_long == len(pairs)
    assert [row.input_ids for row in cut.features] == expected["input_ids"]
    assert [row.token_type_ids for row in cut.features] == expected["token_type_ids"]
    # Windows doc_stride 8 apart: transformers' overflowing rows with an overlap of the window's size - 8.
    settings = InputSettings(max_seq_len=32, long_inputs="window", doc_stride=8)
    single = encode(TASKS["sst2"], pairs, ours, settings, training=False)
    room = 32 - framing(ours).specials
    expected = theirs(firsts, truncation=True, max_length=32, stride=room - 8, return_overflowing_tokens=True)
    assert [row.input_ids for row in single.features] == expected["input_ids"]
    short = [dataclasses.replace(e, text_a=" ".join(e.text_a.split()[:3])) for e in pairs[:10]]  # a first text kept whole
    windowed = encode(TASKS["mrpc"], short, ours, settings, training=False)
    expected = [row for e in short for row in theirs(
        e.text_a, e.text_b, truncation="only_second", max_length=32, return_overflowing_tokens=True,
        stride=32 - framing(ours, pair=True).specials - len(ours.encode(e.text_a, add_special_tokens=False)) - 8,
        return_token_type_ids=True)["input_ids"]]
    assert windowed.too_long == len(short) and [row.input_ids for row in windowed.features] == expected


@pytest.mark.slow
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_tags_answers_and_targets_sit_on_their_tokens_in_any_frame(transformers_tokenizers, examples, model_type):
    ours, theirs = tokenizers(transformers_tokenizers, model_type)
    # Tagging: each word's label on its first token; its tokens, up to the next word's, spell it.
    sentences = examples["conll2003"]
    encoded = encode(TASKS["conll2003"], sentences, ours, InputSettings(max_seq_len=512), training=True)
    for sentence, row in zip(sentences, encoded.features):
        assert row.input_ids == theirs(" ".join(sentence.words))["input_ids"]
        starts = [t for t, word in enumerate(row.word_ids) if word is not None]
        assert [row.word_ids[t] for t in starts] == list(range(len(sentence.words)))
        assert [row.token_labels[t] for t in starts] == [TASKS["conll2003"].labels.index(tag) for tag in sentence.tags]
        assert all(label == IGNORE_INDEX for t, label in enumerate(row.token_labels) if t not in starts)
        ends = starts[1:] + [len(row.input_ids) - (framing(ours).specials - framing(ours).before)]
        for word, start, end in zip(sentence.words, starts, ends):
            assert spelled(ours, row.input_ids[start:end]) == normalized(ours, word), (word, model_type)
    # SQuAD: the gold span spells the answer, in rows framed as "[CLS] question [SEP] window [SEP]".
    questions = examples["squad_v2"]
    encoded = encode(TASKS["squad_v2"], questions, ours, InputSettings(max_seq_len=96, doc_stride=32), training=True)
    expected = [row for e in questions for row in theirs(
        e.question, e.context, truncation="only_second", max_length=96, return_overflowing_tokens=True,
        stride=96 - framing(ours, pair=True).specials - len(ours.encode(e.question, add_special_tokens=False)) - 32
    )["input_ids"]]
    assert [row.input_ids for row in encoded.features] == expected and encoded.too_long
    found = 0
    for row in encoded.features:
        # "no answer" is the row's classification token (BERT's [CLS] first, XLNet's <cls> last), or its
        # first position for a tokenizer without one (GPT-2's)
        cls = ours.cls_token_id if "cls" in ours.special_tokens else None
        assert row.null_position == (row.input_ids.index(cls) if cls is not None else 0)
        if row.start != row.null_position:
            found += 1
            answer = questions[row.example].answers[0]["text"]
            assert spelled(ours, row.input_ids[row.start:row.end + 1]).strip() == normalized(ours, answer)
        else:
            assert row.end == row.null_position
    assert found >= len(questions)
    # ... which sits where the tokenizer's frame puts it: first (BERT's [CLS]) or last (XLNet's <cls>)
    specials = ours.frame([], [])[0]
    if cls is not None and specials[-1] == cls:
        assert all(row.null_position == len(row.input_ids) - 1 for row in encoded.features)
    elif cls is not None and specials[0] == cls:
        assert all(row.null_position == 0 for row in encoded.features)
    # WiC: each target's tokens spell the word; the rows are transformers' pairs.
    pairs = examples["wic"]
    encoded = encode(TASKS["wic"], pairs, ours, InputSettings(max_seq_len=128), training=False)
    for pair, row in zip(pairs, encoded.features):
        assert row.input_ids == theirs(" ".join(pair.sentences[0]), " ".join(pair.sentences[1]))["input_ids"]
        for side, (first, last) in enumerate(row.targets):
            word = pair.sentences[side][pair.positions[side]]
            assert spelled(ours, row.input_ids[first:last + 1]) == normalized(ours, word)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", [t for t in MODEL_TYPES if t != "openai-gpt"])
def test_whole_words_are_the_pieces_between_word_starts(transformers_tokenizers, data_dir, model_type):
    ours, theirs = tokenizers(transformers_tokenizers, model_type)
    table = continuation_table(ours)
    engine = theirs.backend_tokenizer
    text = (data_dir / "wikitext-2-raw/wiki.test.raw").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.split("\n") if line.strip()][:300]
    checked = 0
    for line in lines:
        ids = ours.encode(line, add_special_tokens=False, truncation=False)
        if ours.unk_token_id in ids:  # an unknown character's token spells nothing
            continue
        words, word = [], []
        for token in ids:
            if word and not table[token]:
                words.append(word)
                word = []
            word.append(token)
        words.append(word)
        if ours.kind == "wordpiece":  # its words: BERT's split at whitespace and around punctuation
            expected = [w for w, _ in engine.pre_tokenizer.pre_tokenize_str(engine.normalizer.normalize_str(line))]
        else:  # a BPE's or SentencePiece's: the text's whitespace-separated words
            expected = [normalized(ours, w) for w in line.split()]
        assert [spelled(ours, word) for word in words] == expected, line
        checked += 1
    assert checked >= 100


@pytest.mark.slow
def test_a_vocabulary_that_marks_word_ends_has_no_whole_word_masking(transformers_tokenizers):
    ours, _ = tokenizers(transformers_tokenizers, "openai-gpt")
    with pytest.raises(UserError, match="marks where they end"):
        continuation_table(ours)
