"""Tests for the corpus formats of bertology.data.corpus: compressed text, JSONL and Parquet.

Every file is written with the real library (gzip, bz2, lzma, zstandard, json, pyarrow) from
real text, WikiText-2's first articles when the shared data is there, else the paragraphs
below; each format must give exactly the documents the plain-text reader gives for the same
text, and each kind of damage a one-line error naming the file and the line (or row).
"""

import bz2
import gzip
import json
import lzma
import re
import zlib

import pyarrow
import pyarrow.parquet
import pytest
import zstandard

from bertology.data.corpus import ReadStats, corpus_lines, read_documents, read_lines, text_files
from bertology.data.shards import build_corpus
from bertology.data.tokenizer import train_tokenizer
from bertology.errors import UserError

FALLBACK_TEXT = """ = Lobster = 

 Lobsters are a family of large marine crustaceans . They have long bodies with muscular tails , and live in crevices or burrows on the sea floor . Three of their five pairs of legs have claws , including the first pair , which are usually much larger than the others .

 = = Description = = 

 Lobsters are invertebrates with a hard protective exoskeleton . Like most arthropods , lobsters must moult in order to grow . They may moult more than twenty times in their first years .

 = Valkyria Chronicles = 

 Valkyria Chronicles is a tactical role @-@ playing game developed by Sega . The game began development in 2010 , carrying over a large portion of the work done on its predecessor . Mr. Ozawa directed it .

 It met with positive sales in Japan , and was praised by both Japanese and western critics . After release , it received downloadable content .

 = Tropical Storm Arlene = 

 Tropical Storm Arlene was the first named storm of the season . It formed near the Bahamas on June 8 ! The storm moved north ; it never reached land . Damage was minimal , about $ 1 @.@ 5 million .
"""

COMPRESSORS = {
    ".gz": gzip.compress,
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
    ".zst": lambda data: zstandard.ZstdCompressor().compress(data),
}


def decompressible_prefix(suffix: str, data: bytes) -> bytes:
    """What a one-shot decompressor recovers from the (truncated) compressed `data`."""
    if suffix == ".gz":
        return zlib.decompressobj(wbits=31).decompress(data)
    if suffix == ".bz2":
        return bz2.BZ2Decompressor().decompress(data)
    if suffix == ".xz":
        return lzma.LZMADecompressor().decompress(data)
    return zstandard.ZstdDecompressor().decompressobj().decompress(data)


@pytest.fixture(scope="module")
def articles(data_dir) -> list[str]:
    """Real text as WikiText articles (title line, blank lines, paragraphs), each ending in "\n"."""
    wiki = data_dir.root / "wikitext-2-raw/wiki.valid.raw"
    text = wiki.read_text(encoding="utf-8")[:150_000] if wiki.is_file() else FALLBACK_TEXT
    text = text[: text.rindex("\n") + 1]
    return [a for a in re.split(r"(?m)^(?= = [^=].* = $)", text) if a.strip()]


@pytest.fixture(scope="module")
def plain(articles, tmp_path_factory):
    """The articles as one plain-text file, and the documents the text reader gives for it."""
    path = tmp_path_factory.mktemp("plain") / "wiki.txt"
    path.write_text("".join(articles), encoding="utf-8")
    documents = list(read_documents([path]))
    assert len(documents) == len(articles) >= 3
    return path, documents


def write_jsonl(path, records) -> None:
    lines = "".join(json.dumps(record) + "\n" for record in records).encode("utf-8")
    path.write_bytes(COMPRESSORS[path.suffix](lines) if path.suffix in COMPRESSORS else lines)


def one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("suffix", list(COMPRESSORS))
def test_compressed_text_gives_the_documents_of_the_plain_text(plain, tmp_path, suffix):
    path, documents = plain
    compressed = COMPRESSORS[suffix](path.read_bytes())
    (tmp_path / f"wiki.txt{suffix}").write_bytes(compressed)
    # The same bytes in files whose names say nothing of the compression: found by the first bytes.
    (tmp_path / "wiki").write_bytes(compressed)
    (tmp_path / "wiki-really-compressed.txt").write_bytes(compressed)
    for name in (f"wiki.txt{suffix}", "wiki", "wiki-really-compressed.txt"):
        stats = ReadStats()
        assert list(read_documents([tmp_path / name], stats=stats)) == documents, name
        assert stats.formats == {str(tmp_path / name): "lines"}


def test_zstd_files_of_several_frames_are_read_to_the_end(plain, tmp_path):
    path, documents = plain
    data = path.read_bytes()
    middle = data.index(b"\n = ", len(data) // 2) + 1  # frames cut at an article's title
    frames = [zstandard.ZstdCompressor().compress(part) for part in (data[:middle], data[middle:])]
    (tmp_path / "wiki.txt.zst").write_bytes(b"".join(frames))
    assert list(read_documents([tmp_path / "wiki.txt.zst"])) == documents


@pytest.mark.parametrize("suffix", ["", ".gz", ".zst"])
def test_jsonl_records_are_documents(plain, articles, tmp_path, suffix):
    """One JSON object per line is one document (the Pile's and `datasets`' convention)."""
    _, documents = plain
    path = tmp_path / f"wiki.jsonl{suffix}"
    write_jsonl(path, ({"id": i, "text": article, "meta": {"source": "wiki"}} for i, article in enumerate(articles)))
    assert list(read_documents([path])) == documents
    write_jsonl(path, ({"content": article, "text": 7} for article in articles))
    assert list(read_documents([path], text_field="content")) == documents


def test_parquet_rows_are_documents(plain, articles, tmp_path):
    _, documents = plain
    path = tmp_path / "wiki.parquet"
    # Small row groups, so the reader goes through several record batches.
    pyarrow.parquet.write_table(pyarrow.table({"title": [a.split("\n")[0] for a in articles], "text": articles}),
                                path, row_group_size=3)
    assert list(read_documents([path])) == documents
    large = tmp_path / "large.parquet"  # `datasets` writes large_string columns
    pyarrow.parquet.write_table(pyarrow.table({"body": pyarrow.array(articles, pyarrow.large_string())}), large)
    assert list(read_documents([large], text_field="body")) == documents


def test_records_follow_the_document_format(tmp_path):
    """A record holding a hard-wrapped text is read as a "file" document; blank lines inside a
    record of the "lines" format do not split it."""
    wrapped = "The cat sat on\nthe mat. It\nslept.\n\nA new\nparagraph.\n"
    write_jsonl(tmp_path / "a.jsonl", [{"text": wrapped}, {"text": "One. Two.\n\nThree."}])
    assert list(read_documents([tmp_path / "a.jsonl"], "file")) == [
        ["The cat sat on the mat.", "It slept.", "A new paragraph."],
        ["One.", "Two.", "Three."],
    ]
    assert list(read_documents([tmp_path / "a.jsonl"], "lines")) == [
        ["The cat sat on", "the mat.", "It", "slept.", "A new", "paragraph."],
        ["One.", "Two.", "Three."],
    ]


def test_corpus_lines_are_the_text_files_lines_whatever_the_format(plain, articles, tmp_path):
    path, _ = plain
    write_jsonl(tmp_path / "wiki.jsonl.xz", ({"text": article} for article in articles))
    # Blank lines aside: each record's text ends in "\n", which leaves an empty line after it.
    expected = [line for line in read_lines(path) if line]
    assert [line for line in corpus_lines([tmp_path / "wiki.jsonl.xz"]) if line] == expected


def test_folders_pick_up_compressed_jsonl_and_parquet_files(tmp_path):
    names = ("a.txt.gz", "b.jsonl", "c.jsonl.zst", "d.parquet", "e.raw.bz2", "f.text.xz",
             "g.csv.gz", "h.tar.gz", "i.parquet.gz", "j.json", "sub/k.jsonl.gz", ".hidden.jsonl")
    for name in names:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    expected = ["a.txt.gz", "b.jsonl", "c.jsonl.zst", "d.parquet", "e.raw.bz2", "f.text.xz", "sub/k.jsonl.gz"]
    assert text_files([tmp_path]) == [tmp_path / name for name in expected]


def test_bad_jsonl_lines_name_file_and_line_or_are_skipped_and_counted(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"text": "One. Two."}\n\n{"text": "Three.\n[1, 2]\n{"text": "Caf\xe9."}\n{"text": "Four."}\n')
    with pytest.raises(UserError) as excinfo:
        list(read_documents([path]))
    assert one_line_error(excinfo).startswith(f"{path}:3: not valid JSON (")
    path.write_bytes(b'{"text": "One. Two."}\n[1, 2]\n')
    with pytest.raises(UserError) as excinfo:
        list(read_documents([path]))
    assert one_line_error(excinfo).startswith(f"{path}:2: not a JSON object (found a list")
    path.write_bytes(b'{"text": "One. Two."}\n\n{"text": "Three.\n[1, 2]\n{"text": "Caf\xe9."}\n{"text": "Four."}\n')
    stats = ReadStats()
    assert list(read_documents([path], skip_bad_lines=True, stats=stats)) == [["One.", "Two."], ["Four."]]
    assert stats.skipped_lines == 3  # the broken object, the list and the line that is not UTF-8


@pytest.mark.parametrize(
    ("record", "problem"),
    [({"title": "x", "body": "y"}, "no field 'text' (fields: 'title', 'body'); name the text field with --text-field"),
     ({"text": None}, "field 'text' is null, not a string"),
     ({"text": ["a", "b"]}, "field 'text' is a list, not a string")],
)
def test_a_record_without_a_string_text_field_is_an_error_even_when_skipping(tmp_path, record, problem):
    """A missing field means a wrong --text-field, not a damaged line: skipping would drop the corpus."""
    path = tmp_path / "records.jsonl.gz"
    write_jsonl(path, [{"text": "Fine."}, record])
    for skip in (False, True):
        with pytest.raises(UserError) as excinfo:
            list(read_documents([path], skip_bad_lines=skip))
        assert one_line_error(excinfo) == f"{path}:2: {problem}"


@pytest.mark.parametrize("suffix", list(COMPRESSORS))
@pytest.mark.parametrize("layout", ["wiki.txt", "wiki.jsonl"])
def test_a_truncated_compressed_file_names_the_line_reached(plain, articles, tmp_path, suffix, layout):
    """A cut-off download is an error, not a shorter corpus: the message names the line being read."""
    path, documents = plain
    write_jsonl(tmp_path / "full.jsonl", ({"text": article} for article in articles))
    data = (path if layout == "wiki.txt" else tmp_path / "full.jsonl").read_bytes()
    compressed = COMPRESSORS[suffix](data)
    truncated = tmp_path / f"{layout}{suffix}"
    truncated.write_bytes(compressed[: len(compressed) * 9 // 10])
    line = decompressible_prefix(suffix, truncated.read_bytes()).count(b"\n") + 1
    assert line <= data.count(b"\n")
    with pytest.raises(UserError) as excinfo:
        list(read_documents([truncated]))
    codec = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd"}[suffix]
    assert one_line_error(excinfo) == f"{truncated}:{line}: the {codec} stream ends early: the file is truncated"


def test_reading_streams_the_documents_before_the_damage(plain, articles, tmp_path):
    """Documents come out as the file is read: the first are there before the error at its end."""
    _, documents = plain
    write_jsonl(tmp_path / "full.jsonl", ({"text": article} for article in articles))
    compressed = gzip.compress((tmp_path / "full.jsonl").read_bytes())
    (tmp_path / "cut.jsonl.gz").write_bytes(compressed[: len(compressed) * 9 // 10])
    reader = read_documents([tmp_path / "cut.jsonl.gz"])
    assert next(reader) == documents[0]
    with pytest.raises(UserError, match="the gzip stream ends early"):
        list(reader)


@pytest.mark.parametrize("suffix", list(COMPRESSORS))
def test_damaged_compressed_data_is_an_error_naming_the_file(plain, tmp_path, suffix):
    path, _ = plain
    damaged = tmp_path / f"wiki.txt{suffix}"
    damaged.write_bytes(b"this was never compressed\n" + COMPRESSORS[suffix](path.read_bytes()))
    with pytest.raises(UserError) as excinfo:
        list(read_documents([damaged]))
    codec = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd"}[suffix]
    assert one_line_error(excinfo).startswith(f"{damaged}:1: damaged {codec} data (")


def test_parquet_errors_name_the_file_and_the_row(articles, tmp_path):
    path = tmp_path / "wiki.parquet"
    pyarrow.parquet.write_table(pyarrow.table({"title": ["a", "b"], "content": ["One.", "Two."]}), path)
    with pytest.raises(UserError) as excinfo:
        list(read_documents([path]))
    assert one_line_error(excinfo) == (f"{path}: no column 'text' (columns: 'title', 'content'); "
                                       "name the text column with --text-field")
    pyarrow.parquet.write_table(pyarrow.table({"text": [1, 2]}), path)
    with pytest.raises(UserError) as excinfo:
        list(read_documents([path]))
    assert one_line_error(excinfo) == f"{path}: column 'text' holds int64, not strings"
    texts = articles[:2] + [None] + articles[2:]
    pyarrow.parquet.write_table(pyarrow.table({"text": pyarrow.array(texts, pyarrow.string())}), path,
                                row_group_size=2)
    with pytest.raises(UserError) as excinfo:
        list(read_documents([path]))
    assert one_line_error(excinfo) == f"{path}: row 2: column 'text' is null, not a string"
    path.write_bytes(path.read_bytes()[:-100])  # the footer, which Parquet reads first, cut off
    with pytest.raises(UserError) as excinfo:
        list(read_documents([path]))
    assert one_line_error(excinfo).startswith(f"{path}: not a readable Parquet file (")
    (tmp_path / "wiki.parquet.gz").write_bytes(b"x")
    with pytest.raises(UserError, match="a compressed Parquet file cannot be read in batches"):
        list(read_documents([tmp_path / "wiki.parquet.gz"]))


# ---------------------------------------------------------------------------------------
# Through the shard cache and the tokenizer trainer
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(plain):
    path, _ = plain
    return train_tokenizer([path], vocab_size=1000, min_frequency=1)


def same_tokens(a, b) -> bool:
    return (
        (a.tokens(0, a.num_tokens) == b.tokens(0, b.num_tokens)).all()
        and (a.sentence_offsets == b.sentence_offsets).all()
        and (a.document_offsets == b.document_offsets).all()
    )


def test_build_corpus_gives_the_same_tokens_from_jsonl_gz_and_parquet(plain, articles, tokenizer, tmp_path):
    path, documents = plain
    reference = build_corpus([path], tokenizer, tmp_path / "cache")
    assert reference.num_documents == len(documents)
    write_jsonl(tmp_path / "wiki.jsonl.gz", ({"text": article} for article in articles))
    pyarrow.parquet.write_table(pyarrow.table({"text": articles}), tmp_path / "wiki.parquet", row_group_size=5)
    for other in (tmp_path / "wiki.jsonl.gz", tmp_path / "wiki.parquet"):
        corpus = build_corpus([other], tokenizer, tmp_path / "cache")
        assert corpus.folder != reference.folder and not corpus.reused
        assert corpus.num_tokens == reference.num_tokens
        assert same_tokens(corpus, reference), other


def test_the_shard_cache_sees_a_compressed_file_change(plain, articles, tokenizer, tmp_path):
    path = tmp_path / "wiki.jsonl.zst"
    write_jsonl(path, ({"text": article, "lead": article[:300]} for article in articles))
    first = build_corpus([path], tokenizer, tmp_path / "cache")
    assert build_corpus([path], tokenizer, tmp_path / "cache").reused
    write_jsonl(path, ({"text": article} for article in articles[1:]))  # same name, new content
    second = build_corpus([path], tokenizer, tmp_path / "cache")
    assert not second.reused and second.folder != first.folder
    assert second.num_documents == first.num_documents - 1
    (tmp_path / "rest.txt").write_text("".join(articles[1:]), encoding="utf-8")
    assert same_tokens(second, build_corpus([tmp_path / "rest.txt"], tokenizer, tmp_path / "cache"))
    write_jsonl(path, ({"text": article, "lead": article[:300]} for article in articles))
    leads = build_corpus([path], tokenizer, tmp_path / "cache", text_field="lead")
    assert not leads.reused and leads.num_documents == len(articles) and leads.num_tokens < first.num_tokens


def test_build_corpus_skips_and_counts_bad_jsonl_lines(tokenizer, tmp_path):
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "Lobsters live in the sea."}\n{"text": \n\xff\n{"text": "They moult."}\n'))
    with pytest.raises(UserError, match=r"bad\.jsonl\.gz:2: not valid JSON"):
        build_corpus([path], tokenizer, tmp_path / "cache")
    corpus = build_corpus([path], tokenizer, tmp_path / "cache", skip_bad_lines=True)
    assert corpus.skipped_lines == 2 and corpus.num_documents == 2


@pytest.mark.slow
def test_the_tokenizer_trainer_reads_every_format(plain, articles, tokenizer, tmp_path):
    """A vocabulary trained on the JSONL or Parquet form of a text equals the one trained on the text."""
    write_jsonl(tmp_path / "wiki.jsonl.bz2", ({"body": article} for article in articles))
    pyarrow.parquet.write_table(pyarrow.table({"body": articles}), tmp_path / "wiki.parquet")
    vocab = tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size)))
    for other in (tmp_path / "wiki.jsonl.bz2", tmp_path / "wiki.parquet"):
        trained = train_tokenizer([other], vocab_size=1000, min_frequency=1, text_field="body")
        assert trained.convert_ids_to_tokens(list(range(trained.vocab_size))) == vocab, other
