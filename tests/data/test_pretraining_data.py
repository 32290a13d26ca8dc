"""Tests for bertology.data (corpus, shards, pretraining): reading, the shard cache, instances, masking and batching.

Most tests use small synthetic corpora in which every word is unique ("w0 w1 w2 ...", one
vocabulary entry each), so a token id tells exactly where in the corpus it came from:
id - 5 is the word's running number.
"""

import json
import re
import textwrap

import numpy as np
import pytest
import torch

from bertology.data import shards
from bertology.data.corpus import (
    ReadStats,
    corpus_notes,
    detect_format,
    read_documents,
    split_sentences,
    text_files,
)
from bertology.data.pretraining import (
    PretrainingDataset,
    _truncation,
    collate,
    make_batches,
    mask_tokens,
    static_mask_seeds,
)
from bertology.data.shards import build_corpus, continuation_table
from bertology.data.tokenizer import SPECIAL_TOKENS, Tokenizer, train_tokenizer
from bertology.errors import UserError
from bertology.ops import IGNORE_INDEX

NUM_WORDS = 20_000
FIRST_WORD_ID = len(SPECIAL_TOKENS)  # "w0" follows [PAD] [UNK] [CLS] [SEP] [MASK]
PAD, CLS, SEP, MASK = 0, 2, 3, 4


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    vocab = [*SPECIAL_TOKENS, *(f"w{i}" for i in range(NUM_WORDS)), ".", "##a", "##b", "##c"]
    return Tokenizer(vocab)


def write_corpus(path, sentence_lengths_per_doc, first_word=0):
    """Write a "lines" corpus: one sentence per line of unique words, blank lines between documents.

    Returns the word numbers of each document's sentences.
    """
    word = first_word
    documents, lines = [], []
    for lengths in sentence_lengths_per_doc:
        document = []
        for length in lengths:
            document.append(list(range(word, word + length)))
            lines.append(" ".join(f"w{w}" for w in document[-1]))
            word += length
        documents.append(document)
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return documents


def random_lengths(rng, num_docs, sentences, low, high):
    return [rng.integers(low, high + 1, size=sentences).tolist() for _ in range(num_docs)]


def corpus_from(tmp_path, tokenizer, sentence_lengths_per_doc, **kwargs):
    source = tmp_path / "corpus.txt"
    documents = write_corpus(source, sentence_lengths_per_doc)
    return build_corpus([source], tokenizer, tmp_path / "cache", **kwargs), documents


def document_of(corpus):
    """(num_tokens,) array: the document each corpus token belongs to."""
    sentence_doc = np.repeat(np.arange(corpus.num_documents), np.diff(corpus.document_offsets))
    return np.repeat(sentence_doc, np.diff(corpus.sentence_offsets))


def wrapped_book(rng, paragraphs=40):
    words = ["the", "whale", "sea", "captain", "ship", "said", "and", "of", "a", "long", "night", "Ahab"]
    text = []
    for _ in range(paragraphs):
        sentences = []
        for _ in range(rng.integers(3, 8)):
            sentence = " ".join(rng.choice(words, size=rng.integers(6, 20)))
            sentences.append(sentence[0].upper() + sentence[1:] + ".")
        text.append(textwrap.fill(" ".join(sentences), width=72))
    return "\n\n".join(text) + "\n"


# ---------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------


def test_split_sentences():
    assert split_sentences('He left. "Why?" she asked. Mr. Smith stayed.') == [
        "He left.",
        '"Why?" she asked.',
        "Mr. Smith stayed.",
    ]
    assert split_sentences("It ended (in 1990.) 1991 began! Then J. R. Ewing came.") == [
        "It ended (in 1990.)",
        "1991 began!",
        "Then J. R. Ewing came.",
    ]
    # Lowercase after a period, WikiText's decimal mark and species initials do not split.
    assert split_sentences("A mass of 0 @.@ 7 kg. see e.g. this. H. americanus is a lobster .") == [
        "A mass of 0 @.@ 7 kg. see e.g. this.",
        "H. americanus is a lobster .",
    ]


def test_lines_format_blank_lines_separate_documents(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("First one. Second one.\nThird.\n\n\nOther doc.\n  \nLast doc.", encoding="utf-8")
    stats = ReadStats()
    assert list(read_documents([path], "lines", stats=stats)) == [
        ["First one.", "Second one.", "Third."],
        ["Other doc."],
        ["Last doc."],
    ]
    assert (stats.files, stats.documents, stats.sentences) == (1, 3, 5)
    assert stats.formats == {str(path): "lines"}


def test_wikitext_titles_separate_articles_and_headings_are_dropped(tmp_path):
    path = tmp_path / "wiki.raw"
    path.write_text(
        " \n = Lobster = \n \n Lobsters are big . They live in the sea .\n \n"
        " = = Description = = \n \n They are blue .\n Very blue .\n \n"
        " = Valkyrie = \n \n A game .\n",
        encoding="utf-8",
    )
    assert list(read_documents([path], "lines")) == [
        ["Lobsters are big .", "They live in the sea .", "They are blue .", "Very blue ."],
        ["A game ."],
    ]


def test_file_format_rejoins_wrapped_lines(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text("The cat sat on\nthe mat. It\nslept.\n\nA new\nparagraph.\n", encoding="utf-8")
    assert list(read_documents([path], "file")) == [["The cat sat on the mat.", "It slept.", "A new paragraph."]]


def test_auto_detects_wrapped_books_and_line_files(tmp_path):
    rng = np.random.default_rng(0)
    book = tmp_path / "book.txt"
    book.write_text(wrapped_book(rng), encoding="utf-8")
    lines = tmp_path / "lines.txt"
    # BERT's format: one sentence per line, sentences of varied length, documents apart.
    sentences = [" ".join(["word"] * n) + "." for n in rng.integers(2, 40, size=200)]
    lines.write_text("\n".join(s if i % 20 else "\n" + s for i, s in enumerate(sentences)), encoding="utf-8")
    assert detect_format(book) == "file"
    assert detect_format(lines) == "lines"
    stats = ReadStats()
    documents = list(read_documents([book, lines], "auto", stats=stats))
    assert stats.formats == {str(book): "file", str(lines): "lines"}
    assert len(documents) == 1 + 10
    assert all(len(s) < 300 and "\n" not in s for s in documents[0])


def test_a_corpus_of_one_text_file_is_cut_into_documents(tmp_path):
    """One document could hold nothing out for evaluation: a one-file corpus read with "auto" is
    cut at its blank lines (a wrapped book's paragraphs rejoined), or at every line without them."""
    rng = np.random.default_rng(0)
    book = tmp_path / "book.txt"
    book.write_text(wrapped_book(rng, paragraphs=12), encoding="utf-8")
    stats = ReadStats()
    paragraphs = list(read_documents([book], stats=stats))
    assert stats.formats == {str(book): "paragraphs"} and len(paragraphs) == 12
    assert paragraphs == [[s for doc in read_documents([p], "file") for s in doc] for p in split_book(book, tmp_path)]
    assert "one text file, read as a document per paragraph" in corpus_notes(stats.formats)
    assert len(list(read_documents([book], "file"))) == 1  # asked for, one document stays one
    blocks = tmp_path / "blocks.txt"
    blocks.write_text("A first document.\nIts second line.\n\nA second document.\n", encoding="utf-8")
    stats = ReadStats()
    assert list(read_documents([blocks], stats=stats)) == [["A first document.", "Its second line."],
                                                          ["A second document."]]
    assert stats.formats == {str(blocks): "lines"} and corpus_notes(stats.formats) == ""
    lines = tmp_path / "lines.txt"
    lines.write_text("One line. Two sentences.\nAnother line.\nA third.\n", encoding="utf-8")
    stats = ReadStats()
    assert list(read_documents([lines], stats=stats)) == [["One line.", "Two sentences."], ["Another line."],
                                                          ["A third."]]
    assert "a document per line (the file has no blank lines)" in corpus_notes(stats.formats)
    assert len(list(read_documents([lines, blocks]))) == 3  # two files: each read as before


def split_book(book, folder):
    """The paragraphs of a wrapped book, each written to a file of its own."""
    paragraphs = book.read_text(encoding="utf-8").strip().split("\n\n")
    for i, paragraph in enumerate(paragraphs):
        (folder / f"paragraph-{i}.txt").write_text(paragraph + "\n", encoding="utf-8")
    return [folder / f"paragraph-{i}.txt" for i in range(len(paragraphs))]


@pytest.mark.slow
def test_auto_detection_on_real_wikitext_and_gutenberg(data_dir):
    wiki = data_dir / "wikitext-2-raw/wiki.valid.raw"
    books = sorted((data_dir / "gutenberg").glob("*.txt"))
    assert detect_format(wiki) == "lines"
    assert [detect_format(book) for book in books] == ["file"] * len(books)
    titles = sum(1 for line in wiki.read_text(encoding="utf-8").splitlines() if re.match(r"^ = [^=].* = $", line))
    documents = list(read_documents([wiki]))
    assert len(documents) == titles
    assert not any(s.startswith("= ") for document in documents for s in document)  # headings dropped


def test_text_files_folder_rule(tmp_path):
    for name in ("b.raw", "a.txt", "c.text", "notes", "table.csv", ".hidden.txt", "sub/e.txt", ".git/f.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x", encoding="utf-8")
    assert text_files([tmp_path]) == [tmp_path / n for n in ("a.txt", "b.raw", "c.text", "sub/e.txt")]
    assert text_files([tmp_path / "notes"]) == [tmp_path / "notes"]  # named files are read whatever their name


def test_reading_errors(tmp_path):
    with pytest.raises(UserError, match="missing.txt: no such file or folder"):
        list(read_documents([tmp_path / "missing.txt"]))
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "data.csv").write_text("a,b", encoding="utf-8")
    with pytest.raises(UserError, match=r"empty: folder holds no corpus files"):
        list(read_documents([folder]))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n", encoding="utf-8")
    with pytest.raises(UserError, match="blank.txt: the corpus has no text"):
        list(read_documents([blank]))
    with pytest.raises(UserError, match="unknown document format 'pages'"):
        list(read_documents([blank], "pages"))


def test_invalid_utf8_names_file_and_line_or_is_skipped(tmp_path, tokenizer):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"w1 w2\nw3 \xff\xfe w4\nw5\n\n\xc3\nw6\n")
    with pytest.raises(UserError, match=r"bad\.txt:2: not valid UTF-8"):
        list(read_documents([path]))
    stats = ReadStats()
    assert list(read_documents([path], skip_bad_lines=True, stats=stats)) == [["w1 w2", "w5"], ["w6"]]
    assert stats.skipped_lines == 2
    corpus = build_corpus([path], tokenizer, tmp_path / "cache", skip_bad_lines=True)
    assert corpus.skipped_lines == 2 and corpus.num_sentences == 3


# ---------------------------------------------------------------------------------------
# The shard cache
# ---------------------------------------------------------------------------------------


def test_build_corpus_stores_every_sentence(tmp_path, tokenizer):
    rng = np.random.default_rng(1)
    corpus, documents = corpus_from(tmp_path, tokenizer, random_lengths(rng, 7, 9, 1, 12))
    assert not corpus.reused
    assert corpus.num_documents == 7
    assert corpus.num_sentences == 63
    assert corpus.num_tokens == sum(len(s) for d in documents for s in d)
    assert corpus._shards[0].dtype == np.uint16
    for index, document in enumerate(documents):
        got = corpus.document(index)
        assert [s.tolist() for s in got] == [[FIRST_WORD_ID + w for w in s] for s in document]


def test_shards_and_workers_do_not_change_the_corpus(tmp_path, tokenizer, monkeypatch):
    rng = np.random.default_rng(2)
    source = tmp_path / "corpus.txt"
    write_corpus(source, random_lengths(rng, 5, 30, 1, 9))
    whole = build_corpus([source], tokenizer, tmp_path / "one")
    monkeypatch.setattr(shards, "_SHARD_TOKENS", 50)
    monkeypatch.setattr(shards, "_ENCODE_BATCH", 7)
    sharded = build_corpus([source], tokenizer, tmp_path / "many", num_workers=3)
    assert len(sharded._shards) > 5
    assert np.array_equal(sharded.sentence_offsets, whole.sentence_offsets)
    assert np.array_equal(sharded.document_offsets, whole.document_offsets)
    everything = whole.tokens(0, whole.num_tokens)
    assert np.array_equal(sharded.tokens(0, sharded.num_tokens), everything)
    assert np.array_equal(sharded.tokens(37, 222), everything[37:222])  # crosses several shards


def test_cache_is_reused_without_tokenizing(tmp_path, tokenizer, monkeypatch):
    source = tmp_path / "corpus.txt"
    write_corpus(source, [[3, 4], [5]])
    first = build_corpus([source], tokenizer, tmp_path / "cache")

    def no_tokenizing(*args):
        raise AssertionError("the cache should have been reused")

    monkeypatch.setattr(shards, "_encode", no_tokenizing)
    again = build_corpus([source], tokenizer, tmp_path / "cache")
    assert again.reused and again.folder == first.folder
    monkeypatch.undo()
    # Different inputs give a different cache folder.
    other = build_corpus([source], tokenizer, tmp_path / "cache", doc_format="file")
    assert not other.reused and other.folder != first.folder and other.num_documents == 1
    source.write_text(source.read_text(encoding="utf-8") + "\nw99\n", encoding="utf-8")
    changed = build_corpus([source], tokenizer, tmp_path / "cache")
    assert not changed.reused and changed.num_sentences == 4


@pytest.mark.parametrize("damage", ["garbage manifest", "missing manifest", "truncated shard", "wrong count"])
def test_damaged_cache_is_rebuilt(tmp_path, tokenizer, damage):
    source = tmp_path / "corpus.txt"
    write_corpus(source, [[3, 4], [5]])
    corpus = build_corpus([source], tokenizer, tmp_path / "cache")
    manifest = corpus.folder / "manifest.json"
    if damage == "garbage manifest":
        manifest.write_text("{", encoding="utf-8")
    elif damage == "missing manifest":
        manifest.unlink()
    elif damage == "truncated shard":
        shard = corpus.folder / "tokens-00000.npy"
        shard.write_bytes(shard.read_bytes()[:-4])
    else:
        fields = json.loads(manifest.read_text(encoding="utf-8"))
        fields["num_tokens"] += 1
        manifest.write_text(json.dumps(fields), encoding="utf-8")
    rebuilt = build_corpus([source], tokenizer, tmp_path / "cache")
    assert not rebuilt.reused and rebuilt.num_tokens == 12
    assert build_corpus([source], tokenizer, tmp_path / "cache").reused


def test_split_holds_out_whole_documents(tmp_path, tokenizer):
    corpus, _ = corpus_from(tmp_path, tokenizer, [[2]] * 40)
    train, held_out = corpus.split(0.1, seed=3)
    assert len(held_out) == 4 and len(train) == 36
    assert sorted([*train, *held_out]) == list(range(40))
    assert all(np.array_equal(a, b) for a, b in zip(corpus.split(0.1, seed=3), (train, held_out)))
    assert not np.array_equal(corpus.split(0.1, seed=4)[1], held_out)
    assert len(corpus.split(0.001, seed=0)[1]) == 1  # at least one held out
    assert len(corpus.split(0.0, seed=0)[1]) == 0
    with pytest.raises(UserError, match="eval_fraction"):
        corpus.split(1.0, seed=0)


def test_continuation_table(tokenizer):
    table = continuation_table(tokenizer)
    assert table.shape == (tokenizer.vocab_size,) and table.sum() == 3
    assert table[tokenizer.convert_tokens_to_ids("##a")] and not table[tokenizer.convert_tokens_to_ids("w1")]


# ---------------------------------------------------------------------------------------
# Instances
# ---------------------------------------------------------------------------------------


def dataset(corpus, max_seq_length, format="pairs", pair_task="nsp", short_seq_prob=0.1, seed=0, doc_ids=None):
    doc_ids = np.arange(corpus.num_documents) if doc_ids is None else doc_ids
    return PretrainingDataset(corpus, doc_ids, max_seq_length, format, pair_task, short_seq_prob, CLS, SEP, seed)


def segments(instance):
    """The content between the [CLS]/[SEP] markers of an instance, as lists of word numbers."""
    ids = instance.input_ids
    assert ids[0] == CLS and ids[-1] == SEP
    cuts = np.flatnonzero(ids == SEP)
    bounds = [0, *cuts]
    return [(ids[a + 1 : b] - FIRST_WORD_ID).tolist() for a, b in zip(bounds, bounds[1:])]


def test_truncation_counts_match_the_reference_loop():
    def reference(a, b, limit):  # BERT's truncate_seq_pair, counting instead of popping
        removed = [0, 0]
        while a + b > limit:
            if a > b:
                a, removed[0] = a - 1, removed[0] + 1
            else:
                b, removed[1] = b - 1, removed[1] + 1
        return tuple(removed)

    for a in range(1, 25):
        for b in range(1, 25):
            for limit in (2, 5, 13, 30):
                assert _truncation(a, b, limit) == reference(a, b, limit), (a, b, limit)


@pytest.fixture(scope="module")
def pair_corpus(tmp_path_factory, tokenizer):
    rng = np.random.default_rng(4)
    corpus, _ = corpus_from(tmp_path_factory.mktemp("pairs"), tokenizer, random_lengths(rng, 20, 40, 2, 9))
    return corpus


def test_nsp_pairs(pair_corpus):
    max_len = 32
    doc = document_of(pair_corpus)
    labels = []
    for epoch in range(12):
        for instance in dataset(pair_corpus, max_len, pair_task="nsp", short_seq_prob=0.0).instances(epoch):
            a, b = segments(instance)
            assert 1 <= len(a) and 1 <= len(b) and len(instance.input_ids) <= max_len
            assert instance.token_type_ids.tolist() == [0] * (len(a) + 2) + [1] * (len(b) + 1)
            assert np.all(np.diff(a) == 1) and np.all(np.diff(b) == 1)  # spans of the corpus
            if instance.pair_label == 0:  # B is the continuation of A, in the same document
                assert doc[a[0]] == doc[b[-1]] and b[0] > a[-1]
                if len(instance.input_ids) < max_len:  # untruncated: nothing in between
                    assert b[0] == a[-1] + 1
            else:
                assert instance.pair_label == 1 and doc[b[0]] != doc[a[0]]
            labels.append(instance.pair_label)
    # Half the pairs are random, a little more since a one-sentence chunk (here only at the
    # end of a document) always takes a random B.
    assert len(labels) > 2000 and 0.48 < np.mean(labels) < 0.57


def test_sop_pairs(pair_corpus):
    doc = document_of(pair_corpus)
    labels = []
    for epoch in range(12):
        for instance in dataset(pair_corpus, 32, pair_task="sop").instances(epoch):
            a, b = segments(instance)
            first, second = (b, a) if instance.pair_label == 1 else (a, b)
            assert doc[first[0]] == doc[second[-1]] and second[0] > first[-1]
            if len(instance.input_ids) < 32:
                assert second[0] == first[-1] + 1
            labels.append(instance.pair_label)
    assert len(labels) > 1800 and abs(np.mean(labels) - 0.5) < 0.04


def test_short_seq_prob_makes_short_pairs(tmp_path, tokenizer):
    rng = np.random.default_rng(5)
    corpus, _ = corpus_from(tmp_path, tokenizer, random_lengths(rng, 2, 2000, 3, 9))

    def short_share(probability):
        lengths = np.concatenate(
            [dataset(corpus, 64, pair_task=None, short_seq_prob=probability).instances(e).lengths for e in range(10)]
        )
        return np.mean(lengths < 64)

    # A short target is a uniform length in [2, 61]; a few land close enough to 61 to fill anyway.
    assert 0.07 < short_share(0.1) < 0.13
    assert short_share(0.0) < 0.01  # only document ends


@pytest.mark.parametrize("format", ["full_sentences", "contiguous"])
def test_packing_covers_every_token_once_and_crosses_documents(pair_corpus, format):
    max_len = 40
    ds = dataset(pair_corpus, max_len, format=format, pair_task=None)
    instances = ds.instances(0)
    words, crossings = [], 0
    for instance in instances:
        assert instance.pair_label == -1 and not instance.token_type_ids.any()
        assert len(instance.input_ids) <= max_len
        parts = segments(instance)
        crossings += len(parts) - 1
        for part in parts:
            assert len(part) >= 1 and np.all(np.diff(part) == 1)
        words += [w for part in parts for w in part]
    assert sorted(words) == list(range(pair_corpus.num_tokens))
    assert crossings > 0
    assert set(collate(instances[:8], PAD)) == {"input_ids", "token_type_ids", "attention_mask", "special_mask"}
    lengths = instances.lengths
    if format == "contiguous":  # full, but for a [SEP] with no room after it at a document's end
        assert lengths[:-1].min() >= max_len - 1 and np.mean(lengths == max_len) > 0.95
    else:  # whole sentences of 2-9 tokens leave at most 8 slots empty
        assert lengths[:-1].min() >= max_len - 8 and lengths.mean() > 0.9 * max_len


def test_full_sentences_cuts_only_sentences_longer_than_the_budget(tmp_path, tokenizer):
    corpus, documents = corpus_from(tmp_path, tokenizer, [[3, 25, 4], [6]])
    parts = [segments(instance) for instance in dataset(corpus, 12, "full_sentences", None).instances(0)]
    flat = sorted(tuple(p) for instance in parts for p in instance)
    # The 25-token sentence becomes pieces of the 10-token budget; the others stay whole.
    assert sum(len(p) for p in flat) == 38 and max(len(p) for p in flat) == 10
    assert all(len(instance_parts) <= 2 for instance_parts in parts)


@pytest.mark.parametrize("format,pair_task", [("pairs", "nsp"), ("pairs", "sop"), ("full_sentences", None)])
def test_instances_are_deterministic_per_seed_and_epoch(pair_corpus, format, pair_task):
    def ids(seed, epoch):
        instances = dataset(pair_corpus, 32, format, pair_task, seed=seed).instances(epoch)
        return [(tuple(x.input_ids), x.pair_label) for x in instances]

    assert ids(0, 0) == ids(0, 0)
    assert ids(0, 1) != ids(0, 0)
    assert ids(1, 0) != ids(0, 0)


def test_dataset_argument_errors(pair_corpus):
    with pytest.raises(UserError, match="needs format 'pairs'"):
        dataset(pair_corpus, 32, "full_sentences", "nsp")
    with pytest.raises(UserError, match="unknown instance format"):
        dataset(pair_corpus, 32, "segments", None)
    with pytest.raises(UserError, match="too small"):
        dataset(pair_corpus, 4, "pairs", "nsp")


# ---------------------------------------------------------------------------------------
# Masking
# ---------------------------------------------------------------------------------------


def random_batch(rows=1000, length=128, vocab=1000, seed=0):
    """Rows of [CLS] tokens [SEP] [PAD]... with random lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, vocab, (rows, length), generator=g)
    lengths = torch.randint(8, length + 1, (rows,), generator=g)
    positions = torch.arange(length)[None, :]
    ids[positions >= lengths[:, None]] = PAD
    ids[:, 0] = CLS
    ids[torch.arange(rows), lengths - 1] = SEP
    return ids, (positions >= lengths[:, None] - 1) | (positions == 0)


def test_masking_ratios_and_special_positions():
    vocab = 1000
    ids, special = random_batch(vocab=vocab)
    masked, labels = mask_tokens(ids, special, vocab, MASK, torch.Generator().manual_seed(0))
    chosen = labels != IGNORE_INDEX
    eligible = (~special).sum(1)
    expected = torch.round(eligible * 0.15).long().clamp(min=1)
    assert torch.equal(chosen.sum(1), expected)  # per sequence, exactly BERT's count
    assert abs(chosen.sum() / eligible.sum() - 0.15) < 0.005
    assert not (chosen & special).any() and torch.equal(masked[special], ids[special])
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(masked[~chosen], ids[~chosen])
    replaced = masked[chosen]
    total = chosen.sum().item()
    assert total > 8000
    share_mask = (replaced == MASK).sum().item() / total
    share_kept = (replaced == ids[chosen]).sum().item() / total
    share_random = 1 - share_mask - share_kept
    assert abs(share_mask - 0.8) < 0.02 and abs(share_kept - 0.1) < 0.015 and abs(share_random - 0.1) < 0.015


def test_masking_honours_max_predictions_and_is_reproducible():
    ids, special = random_batch(rows=50)
    masked, labels = mask_tokens(ids, special, 1000, MASK, torch.Generator().manual_seed(1), max_predictions=5)
    counts = (labels != IGNORE_INDEX).sum(1)
    expected = torch.round((~special).sum(1) * 0.15).long().clamp(1, 5)
    assert torch.equal(counts, expected) and counts.max() == 5
    again = mask_tokens(ids, special, 1000, MASK, torch.Generator().manual_seed(1), max_predictions=5)
    assert torch.equal(again[0], masked) and torch.equal(again[1], labels)
    other = mask_tokens(ids, special, 1000, MASK, torch.Generator().manual_seed(2), max_predictions=5)
    assert not torch.equal(other[1], labels)


def test_dynamic_masking_draws_what_it_always_drew():
    # Recorded before static masking was added: the default path gives the same masks as it always did.
    ids = torch.tensor([[CLS, 11, 12, 13, 14, 15, 16, 17, SEP], [CLS, 21, 22, 23, 24, SEP, PAD, PAD, PAD]])
    special = (ids == PAD) | (ids == CLS) | (ids == SEP)
    masked, labels = mask_tokens(ids, special, 30, MASK, torch.Generator().manual_seed(0), mlm_probability=0.4)
    assert masked.tolist() == [[CLS, MASK, 12, 13, 14, 3, 16, MASK, SEP], [CLS, MASK, MASK, 23, 24, SEP, PAD, PAD, PAD]]
    assert labels.tolist() == [[-100, 11, -100, -100, -100, 15, -100, 17, -100],
                               [-100, 21, 22, -100, -100, -100, -100, -100, -100]]


@pytest.mark.parametrize("whole_word", [False, True])
def test_static_masking_masks_each_row_by_its_own_seed_whatever_its_batch(whole_word):
    rows, length, extra = 6, 40, 9
    ids, special = random_batch(rows=rows, length=length, seed=5)
    continuation = (torch.arange(length) % 3 == 2)[None, :] & ~special if whole_word else None
    seeds = static_mask_seeds(0, 0, range(rows))
    masked, labels = mask_tokens(ids, special, 1000, MASK, torch.Generator().manual_seed(0), row_seeds=seeds,
                                 word_continuation=continuation)
    chosen = labels != IGNORE_INDEX
    assert not (chosen & special).any() and torch.equal(labels[chosen], ids[chosen])
    assert torch.all(chosen.sum(1) <= torch.round((~special).sum(1) * 0.15).clamp(min=1)) and chosen.sum(1).min() > 0
    # The same rows in the reverse order, padded wider, with another batch generator: the same masks.
    def wider(x, value):
        return torch.nn.functional.pad(x.flip(0), (0, extra), value=value)
    again, again_labels = mask_tokens(wider(ids, PAD), wider(special, True), 1000, MASK,
                                      torch.Generator().manual_seed(1), row_seeds=seeds.flip(0),
                                      word_continuation=wider(continuation, False) if whole_word else None)
    assert torch.equal(again[:, :length].flip(0), masked) and torch.equal(again_labels[:, :length].flip(0), labels)
    assert (again_labels[:, length:] == IGNORE_INDEX).all()
    # Another copy of the data masks the rows anew (a short row may draw the same few targets by chance).
    _, other = mask_tokens(ids, special, 1000, MASK, torch.Generator().manual_seed(0),
                           row_seeds=static_mask_seeds(0, 1, range(rows)), word_continuation=continuation)
    assert (other != labels).any(1).sum() >= rows - 1


def test_static_mask_seeds_depend_on_seed_copy_and_index_only():
    seeds = static_mask_seeds(0, 3, [5, 9, 5])
    assert seeds.dtype == torch.int64 and (seeds >= 0).all() and seeds[0] == seeds[2] != seeds[1]
    assert static_mask_seeds(0, 3, [9]).item() == seeds[1]
    assert static_mask_seeds(0, 4, [5]).item() != seeds[0] and static_mask_seeds(1, 3, [5]).item() != seeds[0]


def test_whole_word_masking_never_splits_a_word():
    rows, length = 400, 64
    ids, special = random_batch(rows=rows, length=length, seed=3)
    rng = np.random.default_rng(3)
    continuation = torch.zeros(rows, length, dtype=torch.bool)
    word_of = np.full((rows, length), -1)
    for row in range(rows):
        end = int((~special[row]).sum()) + 1  # content is positions 1 .. end-1
        position, word = 1, 0
        while position < end:
            size = min(int(rng.integers(1, 5)), end - position)
            continuation[row, position + 1 : position + size] = True
            word_of[row, position : position + size] = word
            position, word = position + size, word + 1
    _, labels = mask_tokens(
        ids, special, 1000, MASK, torch.Generator().manual_seed(0), word_continuation=continuation
    )
    chosen = (labels != IGNORE_INDEX).numpy()
    for row in range(rows):
        for word in range(word_of[row].max() + 1):
            in_word = chosen[row][word_of[row] == word]
            assert in_word.all() or not in_word.any()
    budget = torch.round((~special).sum(1) * 0.15).long().clamp(min=1)
    assert torch.all(torch.from_numpy(chosen).sum(1) <= budget)
    # Greedy filling with skips nearly always reaches the budget exactly.
    assert chosen.sum() / budget.sum().item() > 0.97


# ---------------------------------------------------------------------------------------
# Batching
# ---------------------------------------------------------------------------------------


def test_collate_pads_and_marks_special_positions(pair_corpus):
    instances = dataset(pair_corpus, 32, "pairs", "nsp").instances(0)[:6]
    batch = collate(instances, PAD)
    longest = max(len(x.input_ids) for x in instances)
    assert batch["input_ids"].shape == batch["special_mask"].shape == (6, longest)
    for row, instance in enumerate(instances):
        n = len(instance.input_ids)
        assert batch["input_ids"][row, :n].tolist() == instance.input_ids.tolist()
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (longest - n)
        assert batch["special_mask"][row].tolist() == [t in (CLS, SEP) for t in instance.input_ids] + [True] * (
            longest - n
        )
        assert batch["special_mask"][row].sum() == 3 + longest - n
    assert batch["pair_labels"].tolist() == [x.pair_label for x in instances]


def test_make_batches():
    batches = make_batches(103, 10, epoch=0, seed=0)
    assert len(batches) == 10 and all(len(b) == 10 for b in batches)  # the last 3 are dropped
    flat = [i for b in batches for i in b]
    assert len(set(flat)) == 100 and flat != sorted(flat)
    assert make_batches(103, 10, epoch=0, seed=0) == batches
    assert make_batches(103, 10, epoch=1, seed=0) != batches
    assert make_batches(9, 10, epoch=0, seed=0) == []


def length_only_guess(instances) -> float:
    """The accuracy of guessing SOP from the segment lengths alone: "swapped" when A is the longer
    (the cue of the unbalanced recipe: the true B holds the chunk's long last sentence), "in order"
    when shorter, half a point on a tie."""
    lengths = instances.segment_lengths.reshape(-1, 2)
    guess = np.sign(lengths[:, 0] - lengths[:, 1])  # 1: swapped, -1: in order, 0: tie
    right = np.where(guess == 0, 0.5, (guess == 1) == (instances.pair_labels == 1))
    return float(right.mean())


@pytest.mark.slow
def test_balanced_sop_pairs_of_real_text_give_length_no_cue(data_dir, minilm_dir, tmp_path):
    corpus = build_corpus([data_dir / "wikitext-2-raw/wiki.valid.raw", data_dir / "wikitext-2-raw/wiki.test.raw"],
                          Tokenizer.from_pretrained(minilm_dir), tmp_path / "cache")
    docs = np.arange(corpus.num_documents)

    def sop(balance: bool):
        return PretrainingDataset(corpus, docs, 128, "pairs", "sop", 0.1, CLS, SEP, seed=0, sop_balance=balance)

    plain, balanced = sop(False).instances(0), sop(True).instances(0)
    assert len(balanced) >= 2000
    assert length_only_guess(plain) > 0.52  # the unbalanced recipe's length cue, on this text
    assert length_only_guess(balanced) == pytest.approx(0.5, abs=0.01)
    lengths = balanced.segment_lengths.reshape(-1, 2)
    starts = balanced.segment_starts.reshape(-1, 2)
    assert (lengths[:, 0] == lengths[:, 1]).all() and (lengths > 0).all() and (2 * lengths[:, 0] + 3 <= 128).all()
    # Both orders hold the same tokens, the text on either side of the cut: in order, A ends where
    # B starts; swapped, the same two spans the other way round.
    swapped = balanced.pair_labels == 1
    first, second = np.where(swapped[:, None], starts[:, ::-1], starts), np.where(swapped[:, None], lengths[:, ::-1], lengths)
    assert (first[:, 0] + second[:, 0] == first[:, 1]).all()
    assert 0.45 < swapped.mean() < 0.55
    with pytest.raises(UserError, match="needs the pair task 'sop'"):
        PretrainingDataset(corpus, docs, 128, "pairs", "nsp", 0.1, CLS, SEP, sop_balance=True)


def test_a_byte_level_bpe_keeps_the_spaces_and_parts_documents_with_its_end_of_text(tmp_path):
    # GPT-2's BPE has no [CLS] or [SEP], and spells a word after a space differently ("ĠIt"): the
    # sentences of a document read back with their spaces, and <|endoftext|> opens and parts documents.
    documents = [["The cat sat.", "It was warm."], ["A dog ran.", "Then it slept.", "The end."]]
    source = tmp_path / "corpus.txt"
    source.write_text("\n\n".join("\n".join(document) for document in documents) + "\n", encoding="utf-8")
    tokenizer = train_tokenizer([source], vocab_size=280, model="bpe", min_frequency=1)
    corpus = build_corpus([source], tokenizer, tmp_path / "cache", doc_format="lines")
    for index, sentences in enumerate(documents):
        assert tokenizer.decode(np.concatenate(corpus.document(index)).tolist()) == " ".join(sentences)
    end_of_text = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert tokenizer.start_token_id == tokenizer.end_token_id == end_of_text
    dataset = PretrainingDataset(corpus, [0, 1], 64, "contiguous", None, 0.0, tokenizer.start_token_id,
                                 tokenizer.end_token_id, seed=0)
    (instance,) = dataset.instances(0)
    texts = tokenizer.decode(instance.input_ids.tolist(), skip_special_tokens=False).split("<|endoftext|>")
    assert texts[0] == "" and texts[-1] == "" and sorted(texts[1:-1]) == sorted(" ".join(d) for d in documents)
