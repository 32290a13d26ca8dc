"""Text hygiene (bertology/text.py), through every reader: universal line ends, control
characters replaced, UTF-16/32 by byte order mark, invisible texts refused in labelled examples.

Each case is a regression test: before text.py, CR-only files were one line, NULs reached
the tokenizer, UTF-16 came through as NUL-interleaved text, and empty or invisible texts
were accepted as examples.
"""

import codecs
import json

import pytest
from helpers import run_cli

from bertology.data.corpus import ReadStats, corpus_lines, read_documents
from bertology.errors import UserError
from bertology.tasks.readers import TASKS, generic_task, read_conll, read_glue, read_squad, read_table
from bertology.text import is_invisible, replace_controls, sniff_encoding, split_lines


def test_split_lines_cuts_at_lf_crlf_and_lone_cr_only():
    assert split_lines("a\nb\r\nc\rd\u2028e\x85f") == ["a", "b", "c", "d\u2028e\x85f"]


def test_replace_controls_keeps_tab_and_counts():
    assert replace_controls("a\x00b\tc\x1bd\x7f") == ("a b\tc d ", 3)


@pytest.mark.parametrize("text, invisible", [
    ("", True), ("  \t", True), ("\u00a0", True), ("\u200b\u200d", True), ("\ufeff", True),
    ("a", False), ("\u00a0x", False), ("。", False),
])
def test_is_invisible(text, invisible):
    assert is_invisible(text) is invisible


@pytest.mark.parametrize("bom, encoding", [
    (codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"),
    (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
])
def test_sniff_encoding_by_byte_order_mark(bom, encoding):
    assert sniff_encoding(bom + "hi".encode(encoding)) == (encoding, len(bom))


def test_sniff_encoding_refuses_utf16_without_mark():
    with pytest.raises(ValueError, match="UTF-16 without a byte order mark"):
        sniff_encoding("plain English text".encode("utf-16-le"))
    assert sniff_encoding("plain English text".encode("utf-8")) == ("utf-8", 0)


# -- corpora -----------------------------------------------------------------------------------


def test_corpus_cr_only_file_is_many_lines_and_documents(tmp_path):
    corpus = tmp_path / "mac.txt"
    corpus.write_bytes(b"First doc sentence.\rStill first.\r\rSecond doc.\r")
    assert list(read_documents([corpus], doc_format="lines")) == [["First doc sentence.", "Still first."],
                                                                  ["Second doc."]]


def test_corpus_crlf_is_read_like_lf(tmp_path):
    lf, crlf = tmp_path / "lf.txt", tmp_path / "crlf.txt"
    lf.write_bytes(b"One.\nTwo.\n\nThree.\n")
    crlf.write_bytes(b"One.\r\nTwo.\r\n\r\nThree.\r\n")
    assert list(read_documents([crlf])) == list(read_documents([lf])) == [["One.", "Two."], ["Three."]]


def test_corpus_control_characters_become_spaces_and_are_counted(tmp_path):
    corpus = tmp_path / "nul.txt"
    corpus.write_bytes(b"A\x00B sentence.\x1b\nTab\tkept.\n")
    stats = ReadStats()
    assert list(read_documents([corpus], doc_format="lines", stats=stats)) == [["A B sentence.", "Tab\tkept."]]
    assert stats.control_characters == 2


def test_corpus_jsonl_escaped_nul_is_replaced(tmp_path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(json.dumps({"text": "Hello\u0000world. Second\r\nline."}) + "\n", encoding="utf-8")
    stats = ReadStats()
    assert list(read_documents([corpus], stats=stats)) == [["Hello world.", "Second", "line."]]
    assert stats.control_characters == 1


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_corpus_utf16_and_utf32_with_mark_are_decoded(tmp_path, encoding):
    corpus = tmp_path / "wide.txt"
    text = "Ünïcode first.\r\nSecond line.\n\nNew doc.\n"
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = codecs.BOM_UTF16_BE + data
    corpus.write_bytes(data)
    assert list(read_documents([corpus], doc_format="lines", skip_bad_lines=True)) == [
        ["Ünïcode first.", "Second line."], ["New doc."]]
    assert list(corpus_lines([corpus])) == ["Ünïcode first.", "Second line.", "", "New doc."]


def test_corpus_utf16_without_mark_is_refused_even_when_skipping(tmp_path):
    corpus = tmp_path / "wide.txt"
    corpus.write_bytes("No mark here.\nAt all.\n".encode("utf-16-le"))
    with pytest.raises(UserError, match=r"wide\.txt: looks like UTF-16 without a byte order mark"):
        list(read_documents([corpus], skip_bad_lines=True))


def test_corpus_bad_utf16_names_the_line(tmp_path):
    corpus = tmp_path / "broken.txt"
    corpus.write_bytes(codecs.BOM_UTF16_LE + "ok\nfine\n".encode("utf-16-le") + b"\x00\xd8" + "x\n".encode("utf-16-le"))
    with pytest.raises(UserError, match=r"broken\.txt:\d+: not valid UTF-16"):
        list(read_documents([corpus]))


def test_tokenizer_train_reports_replaced_controls(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"word\x00other more words here.\nand another line of text.\n" * 20)
    status, out, err = run_cli(capsys, "tokenizer", "train", "--corpus", corpus, "--out", tmp_path / "tok", "--vocab-size", "200")
    assert status == 0
    assert "replaced 20 control character(s)" in out


# -- labelled tasks ----------------------------------------------------------------------------


def test_glue_cr_only_file_reads_every_row(tmp_path):
    file = tmp_path / "dev.tsv"
    file.write_bytes(b"sentence\tlabel\rgood film\t1\rbad film\t0\r")
    examples = read_glue(TASKS["sst2"], file, "dev")
    assert [(e.text_a, e.label, e.where) for e in examples] == [("good film", "1", f"{file}:2"),
                                                                ("bad film", "0", f"{file}:3")]


def test_glue_utf16_file_is_decoded(tmp_path):
    file = tmp_path / "dev.tsv"
    file.write_bytes("sentence\tlabel\nsüß\t1\n".encode("utf-16"))
    assert [e.text_a for e in read_glue(TASKS["sst2"], file, "dev")] == ["süß"]


def test_glue_nul_inside_a_sentence_becomes_a_space(tmp_path):
    file = tmp_path / "dev.tsv"
    file.write_bytes(b"sentence\tlabel\ngood\x00film\t1\n")
    assert read_glue(TASKS["sst2"], file, "dev")[0].text_a == "good film"


@pytest.mark.parametrize("text", ["", "   ", "\u00a0", "\u200b", "\x00"])
def test_glue_invisible_sentence_is_an_error_naming_the_line(tmp_path, text):
    file = tmp_path / "dev.tsv"
    file.write_text(f"sentence\tlabel\ngood film\t1\n{text}\t0\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"dev\.tsv:3: column 'sentence' has no visible text"):
        read_glue(TASKS["sst2"], file, "dev")


@pytest.mark.parametrize("suffix, content, line", [
    (".csv", "text,label\nfine,a\n\"\u200b\",b\n", 3),
    (".jsonl", '{"text": "fine", "label": "a"}\n{"text": "\\u00a0", "label": "b"}\n', 2),
])
def test_custom_table_invisible_text_is_an_error(tmp_path, suffix, content, line):
    file = tmp_path / f"train{suffix}"
    file.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=rf"train\{suffix}:{line}: (column|field) 'text' has no visible text"):
        read_table(generic_task("classification", ("a", "b")), file, "train")


def test_conll_invisible_word_is_an_error(tmp_path):
    file = tmp_path / "train.txt"
    file.write_text("EU B-ORG\n\u00a0 O\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"train\.txt:2: the word has no visible text"):
        read_conll(TASKS["conll2003"], file)


def _squad(question="Who?", context="Ann wrote it.", answer="Ann"):
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "q1", "question": question, "answers": [{"text": answer, "answer_start": 0}]}]}]}]}


@pytest.mark.parametrize("field, value", [("question", " "), ("context", "\u200b"), ("answer", "")])
def test_squad_invisible_text_is_an_error(tmp_path, field, value):
    file = tmp_path / "dev.json"
    file.write_text(json.dumps(_squad(**{field: value})), encoding="utf-8")
    with pytest.raises(UserError, match="has no visible text"):
        read_squad(TASKS["squad"], file, "dev")


def test_squad_escaped_nul_keeps_answer_offsets(tmp_path):
    file = tmp_path / "train.json"
    file.write_text(json.dumps(_squad(context="Ann\u0000wrote it.", answer="Ann\u0000wrote")), encoding="utf-8")
    example = read_squad(TASKS["squad"], file, "train")[0]
    assert example.context == "Ann wrote it." and example.answers[0]["text"] == "Ann wrote"


def test_finetune_on_an_invisible_example_exits_with_one_line(tmp_path, capsys, tiny_model):
    train = tmp_path / "train.csv"
    train.write_text("text,label\ngood,a\n\u200b,b\n", encoding="utf-8")
    status, out, err = run_cli(capsys, "finetune", "--task", "classification", "--data", train,
                               "--model", tiny_model, "--out", tmp_path / "out")
    assert status != 0
    assert err.strip().splitlines() == [f"bertology: error: {train}:3: column 'text' has no visible text (\"\\u200b\")"]


def test_embed_input_reads_cr_only_lines_and_refuses_invisible_ones(tmp_path):
    from bertology.uses.embed import read_texts

    file = tmp_path / "in.txt"
    file.write_bytes(b"first\rsecond\x00half\rthird\r")
    assert list(read_texts(file, None, skip_empty=False)) == [(1, "first"), (2, "second half"), (3, "third")]
    file.write_bytes("fine\n\u200b\n".encode("utf-8"))
    with pytest.raises(UserError, match=r"in\.txt:2: empty line"):
        list(read_texts(file, None, skip_empty=False))
