"""Tests for bertology.tasks.readers: the task table, finding files, the readers of each format and the prediction writers.

The real data sets (through `data_dir`) check counts and layouts of the official files;
tiny files written to tmp_path check that every malformed input stops with a one-line
UserError naming the file and line.
"""

import json
import re

import pytest

from bertology.errors import UserError
from bertology.tasks.readers import (
    CONLL_TAGS,
    TASKS,
    SequenceExample,
    generic_task,
    labels_from_examples,
    read_conll,
    read_examples,
    read_glue,
    read_squad,
    read_table,
    read_text_lines,
    task_files,
    to_iob2,
    write_conll_predictions,
    write_glue_predictions,
    write_squad_predictions,
)


def write(path, text: str | bytes):
    """Write a small test file (bytes as they are, text as UTF-8) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def raises(message_pattern: str):
    """pytest.raises for a UserError whose whole (one-line) message matches the pattern."""
    return pytest.raises(UserError, match=f"^{message_pattern}$")


# --- the task table ---------------------------------------------------------------------


def test_every_task_reports_its_main_metric():
    assert len([spec for spec in TASKS.values() if spec.format == "glue"]) == 9
    for name, spec in TASKS.items():
        assert spec.name == name
        assert spec.main_metric in spec.metrics
        assert spec.kind in ("sequence", "token", "span", "wic")
    assert TASKS["cola"].main_metric == "mcc"
    assert TASKS["mrpc"].main_metric == TASKS["qqp"].main_metric == "f1"
    assert TASKS["stsb"].regression and TASKS["stsb"].labels is None
    assert TASKS["mnli"].labels == ("contradiction", "entailment", "neutral")
    assert TASKS["conll2003"].labels == CONLL_TAGS
    assert TASKS["squad_v2"].unanswerable and not TASKS["squad"].unanswerable


def test_generic_task():
    spec = generic_task("pair-classification", ["neg", "pos"])
    assert (spec.pair, spec.regression, spec.labels) == (True, False, ("neg", "pos"))
    assert (spec.columns.text_a, spec.columns.text_b, spec.columns.label) == ("text", "text_pair", "label")
    regression = generic_task("regression", text_column="review", label_column="stars")
    assert regression.regression and regression.labels is None and regression.main_metric == "spearman"
    with raises("unknown task kind 'ranking': use one of .*"):
        generic_task("ranking")


def test_labels_from_examples_sorts_integers_numerically():
    examples = [SequenceExample(str(i), "x", None, label, "f:1") for i, label in enumerate(["10", "2", "0", "2"])]
    assert labels_from_examples(examples) == ("0", "2", "10")
    words = [SequenceExample("0", "x", None, label, "f:1") for label in ["pos", "neg", "neutral"]]
    assert labels_from_examples(words) == ("neg", "neutral", "pos")
    with raises("the training examples have no labels"):
        labels_from_examples([SequenceExample("0", "x", None, None, "f:1")])


# --- finding files ----------------------------------------------------------------------


def test_task_files_in_folders(tmp_path):
    for name in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"):
        write(tmp_path / "MNLI" / name, "")
    found = task_files(TASKS["mnli"], tmp_path / "MNLI", ["train", "dev", "dev_mismatched"])
    assert found == {split: tmp_path / "MNLI" / name for split, name in
                     [("train", "train.tsv"), ("dev", "dev_matched.tsv"), ("dev_mismatched", "dev_mismatched.tsv")]}
    write(tmp_path / "conll" / "eng.testa", "")
    assert task_files(TASKS["conll2003"], tmp_path / "conll", ["dev"]) == {"dev": tmp_path / "conll" / "eng.testa"}
    with raises(f"{tmp_path / 'conll'}: no train file for conll2003 \\(looked for train.txt, eng.train\\)"):
        task_files(TASKS["conll2003"], tmp_path / "conll", ["train"])
    with raises("task sst2 has no split 'dev_mismatched' \\(splits: train, dev, test\\)"):
        task_files(TASKS["sst2"], tmp_path, ["dev_mismatched"])
    with raises(f"{tmp_path / 'nowhere'}: no such file or folder"):
        task_files(TASKS["sst2"], tmp_path / "nowhere", ["dev"])


def test_a_single_file_serves_every_split(tmp_path):
    file = write(tmp_path / "mine.tsv", "sentence\tlabel\nok\t1\n")
    assert task_files(TASKS["sst2"], file, ["train", "dev"]) == {"train": file, "dev": file}


def test_task_files_on_the_real_folders(data_dir):
    squad = data_dir / "squad/dev-v1.1.json"
    assert task_files(TASKS["squad"], squad.parent, ["dev"]) == {"dev": squad}
    conll = data_dir / "conll2003/valid.txt"
    assert task_files(TASKS["conll2003"], conll.parent, ["dev"])["dev"] == conll


# --- GLUE -------------------------------------------------------------------------------


def test_real_glue_dev_files(data_dir):
    sst2 = read_examples(TASKS["sst2"], data_dir / "glue/SST-2/dev.tsv", "dev")
    assert len(sst2) == 872
    assert {e.label for e in sst2} == {"0", "1"} and all(e.text_b is None for e in sst2)
    assert sst2[0].text_a.startswith("it 's a charming") and sst2[0].where.endswith("dev.tsv:2")

    mrpc = read_examples(TASKS["mrpc"], data_dir / "glue/MRPC/dev.tsv", "dev")  # starts with a byte order mark
    assert len(mrpc) == 408
    assert mrpc[0].label == "1" and mrpc[0].text_b.startswith('" The foodservice pie')  # a quote, left as it is
    assert sum(e.label == "1" for e in mrpc) == 279

    stsb = read_examples(TASKS["stsb"], data_dir / "glue/STS-B/dev.tsv", "dev")
    assert len(stsb) == 1500
    assert stsb[0].label == 5.0 and stsb[1].label == 4.75 and all(0 <= e.label <= 5 for e in stsb)
    assert [e.guid for e in stsb[:3]] == ["0", "1", "2"]


def test_cola_files_with_and_without_header(tmp_path):
    train = write(tmp_path / "train.tsv", "gj04\t1\t\tOur friends won't buy this analysis.\ngj04\t0\t*\tThey drank the pub.\n")
    examples = read_glue(TASKS["cola"], train, "train")
    assert [(e.text_a, e.label) for e in examples] == [("Our friends won't buy this analysis.", "1"),
                                                       ("They drank the pub.", "0")]
    test = write(tmp_path / "test.tsv", "index\tsentence\n0\tBill whistled past the house.\n7\tIt rained.\n")
    examples = read_glue(TASKS["cola"], test, "test")
    assert [(e.guid, e.text_a, e.label) for e in examples] == [("0", "Bill whistled past the house.", None),
                                                               ("7", "It rained.", None)]


def test_glue_test_file_keeps_its_ids(tmp_path):
    qqp = write(tmp_path / "test.tsv", "id\tquestion1\tquestion2\n12\tHow?\tWhy?\n")
    [example] = read_glue(TASKS["qqp"], qqp, "test")
    assert (example.guid, example.text_a, example.text_b, example.label) == ("12", "How?", "Why?", None)


def test_mnli_columns_by_header_name(tmp_path):
    header = "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\tlabel1\tgold_label"
    file = write(tmp_path / "train.tsv", header + "\n0\t1\t2\tgov\tb\tb\tp\tp\tA cat.\tAn animal.\tentailment\tentailment\n")
    [example] = read_glue(TASKS["mnli"], file, "train")
    assert (example.text_a, example.text_b, example.label) == ("A cat.", "An animal.", "entailment")


def test_glue_reads_quotes_as_plain_characters(tmp_path):
    file = write(tmp_path / "dev.tsv", 'sentence\tlabel\n"unbalanced quote\t1\nsay "hi"\t0\n')
    assert [e.text_a for e in read_glue(TASKS["sst2"], file, "dev")] == ['"unbalanced quote', 'say "hi"']


def test_glue_errors_name_file_and_line(tmp_path):
    file = write(tmp_path / "dev.tsv", "sentence\tlabel\ngood\t1\n\nbad\t1\textra\n")
    with raises(f"{file}:4: expected 2 tab-separated columns, got 3"):
        read_glue(TASKS["sst2"], file, "dev")
    file = write(tmp_path / "dev.tsv", "sentence\tlabel\ngood\t1\nbad\tyes\n")
    with raises(f"{file}:3: label 'yes' is not one of 0, 1"):
        read_glue(TASKS["sst2"], file, "dev")
    file = write(tmp_path / "dev.tsv", "sentence\tlabel\ngood\t1\n\xe9t\xe9\t0\n".encode("latin-1"))
    with raises(f"{file}:3: not valid UTF-8"):
        read_glue(TASKS["sst2"], file, "dev")


def test_glue_missing_columns_and_labels(tmp_path):
    file = write(tmp_path / "dev.tsv", "text\tlabel\nhi\t1\n")
    with raises(f"{file}:1: no column 'sentence' \\(columns: text, label\\)"):
        read_glue(TASKS["sst2"], file, "dev")
    test_file = write(tmp_path / "test.tsv", "index\tsentence\n0\thi\n")
    with raises(f"{test_file}:1: no column 'label' \\(columns: index, sentence\\)"):
        read_glue(TASKS["sst2"], test_file, "dev")  # only test files may lack labels
    assert read_glue(TASKS["sst2"], test_file, "test")[0].label is None


def test_stsb_scores(tmp_path):
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    row = "0\tmain\tMSRvid\t2012\t0\tnone\tnone\tA man.\tA guy.\t{}\n"
    for score in ("5.5", "high", "nan"):
        file = write(tmp_path / "dev.tsv", header + row.format("1.0") + row.format(score))
        with raises(f"{file}:3: label '{score}' is not a number from 0 to 5"):
            read_glue(TASKS["stsb"], file, "dev")
    file = write(tmp_path / "dev.tsv", header + row.format("3.800"))
    assert read_glue(TASKS["stsb"], file, "dev")[0].label == 3.8


def test_empty_files_have_no_examples(tmp_path):
    for text in ("", "sentence\tlabel\n", "\n\n"):
        file = write(tmp_path / "dev.tsv", text)
        with raises(f"{file}: no examples"):
            read_glue(TASKS["sst2"], file, "dev")


def test_read_text_lines(tmp_path):
    file = write(tmp_path / "inputs.txt", "\ufefffirst\r\n\n  \nsecond\tpair\n")
    assert read_text_lines(file) == [(1, "first"), (4, "second\tpair")]
    file = write(tmp_path / "inputs.txt", b"ok\n\xff\n")
    with raises(f"{file}:2: not valid UTF-8"):
        read_text_lines(file)
    file = write(tmp_path / "inputs.txt", "\n \n")
    with raises(f"{file}: no examples"):
        read_text_lines(file)


def test_missing_file(tmp_path):
    with raises(f"{tmp_path / 'dev.tsv'}: no such file"):
        read_examples(TASKS["sst2"], tmp_path / "dev.tsv", "dev")


# --- the user's own tables --------------------------------------------------------------


def test_csv_with_quoted_fields(tmp_path):
    spec = generic_task("classification", text_column="review", label_column="stars")
    file = write(tmp_path / "train.csv", 'review,stars\n"Good, really",5\n"Two\nlines",1\n')
    examples = read_table(spec, file, "train")
    assert [(e.text_a, e.label, e.where) for e in examples] == [
        ("Good, really", "5", f"{file}:2"), ("Two\nlines", "1", f"{file}:4")]
    assert labels_from_examples(examples) == ("1", "5")


def test_table_errors(tmp_path):
    spec = generic_task("pair-classification", ["no", "yes"])
    file = write(tmp_path / "dev.csv", "text,label\na,yes\n")
    with raises(f"{file}:1: no column 'text_pair' \\(columns: text, label\\)"):
        read_table(spec, file, "dev")
    file = write(tmp_path / "dev.csv", "text,text_pair,label\na,b,yes\na,b\n")
    with raises(f"{file}:3: expected 3 comma-separated columns, got 2"):
        read_table(spec, file, "dev")
    file = write(tmp_path / "dev.tsv", "text\ttext_pair\tlabel\na\tb\tmaybe\n")
    with raises(f"{file}:2: label 'maybe' is not one of no, yes"):
        read_table(spec, file, "dev")
    with raises(f"{tmp_path / 'dev.xlsx'}: unknown table format: name it .csv, .tsv or .jsonl"):
        read_table(spec, tmp_path / "dev.xlsx", "dev")


def test_jsonl(tmp_path):
    spec = generic_task("regression")
    file = write(tmp_path / "train.jsonl", '{"text": "fine", "label": 3}\n\n{"text": "great", "label": "4.5"}\n')
    assert [(e.text_a, e.label) for e in read_table(spec, file, "train")] == [("fine", 3.0), ("great", 4.5)]
    file = write(tmp_path / "train.jsonl", '{"text": "fine", "label": 3}\n{"text": "great", "label": 4.5\n')
    with raises(f"{file}:2: not valid JSON \\(Expecting ',' delimiter at column 31\\)"):
        read_table(spec, file, "train")
    file = write(tmp_path / "train.jsonl", '{"text": "fine", "label": "good"}\n')
    with raises(f"{file}:1: label 'good' is not a number"):
        read_table(spec, file, "train")
    file = write(tmp_path / "train.jsonl", '{"sentence": "fine", "label": 1}\n')
    with raises(f"{file}:1: no field 'text' \\(fields: sentence, label\\)"):
        read_table(spec, file, "train")
    file = write(tmp_path / "train.jsonl", '["fine", 1]\n')
    with raises(f"{file}:1: expected a JSON object, got list"):
        read_table(spec, file, "train")


# --- CoNLL ------------------------------------------------------------------------------


def test_real_conll_validation_set(data_dir):
    examples = read_examples(TASKS["conll2003"], data_dir / "conll2003/valid.txt", "dev")
    assert len(examples) == 3250
    assert sum(len(e.words) for e in examples) == 51362
    assert all(len(e.words) == len(e.tags) for e in examples)
    assert not any("-DOCSTART-" in e.words for e in examples)
    assert examples[0].words[:3] == ["CRICKET", "-", "LEICESTERSHIRE"] and examples[0].tags[2] == "B-ORG"
    for example in examples:  # IOB2: an entity always starts with B-
        for previous, tag in zip(["O", *example.tags], example.tags):
            assert not tag.startswith("I-") or previous[2:] == tag[2:]


def test_iob1_becomes_iob2(tmp_path):
    assert to_iob2(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "I-ORG"]) == [
        "B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "B-ORG"]
    iob2 = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "B-ORG"]
    assert to_iob2(iob2) == iob2
    file = write(tmp_path / "eng.testa", "-DOCSTART- -X- O O\n\nPeter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\n"
                                         "in IN I-PP O\nGermany NNP I-NP I-LOC\n\nParis\tI-LOC\n")
    examples = read_conll(TASKS["conll2003"], file)
    assert [(e.words, e.tags, e.where) for e in examples] == [
        (["Peter", "Blackburn", "in", "Germany"], ["B-PER", "I-PER", "O", "B-LOC"], f"{file}:3"),
        (["Paris"], ["B-LOC"], f"{file}:8"),
    ]


def test_conll_errors(tmp_path):
    file = write(tmp_path / "train.txt", "EU NNP B-NP B-ORG\nrejects\n")
    with raises(f"{file}:2: expected a word and a tag"):
        read_conll(TASKS["conll2003"], file)
    file = write(tmp_path / "train.txt", "EU NNP B-NP B-ORG\n\nrejects VBZ B-VP S-ORG\n")
    with raises(f"{file}:3: tag 'S-ORG' is not one of O, B-PER, I-PER, B-ORG, I-ORG, B-LOC, I-LOC, B-MISC, I-MISC"):
        read_conll(TASKS["conll2003"], file)
    file = write(tmp_path / "train.txt", "-DOCSTART- -X- -X- O\n\n")
    with raises(f"{file}: no examples"):
        read_conll(TASKS["conll2003"], file)
    file = write(tmp_path / "train.txt", b"EU NNP B-NP B-ORG\n\nM\xfcnchen NNP B-NP B-LOC\n")
    with raises(f"{file}:3: not valid UTF-8"):
        read_conll(TASKS["conll2003"], file)


# --- SQuAD ------------------------------------------------------------------------------


def squad_file(tmp_path, questions, name="train-v1.1.json", context="The cat sat on the mat."):
    """A one-paragraph SQuAD file holding `questions` (the qas list)."""
    data = {"version": "1.1", "data": [{"title": "Cats", "paragraphs": [{"context": context, "qas": questions}]}]}
    return write(tmp_path / name, json.dumps(data))


def question(qid, text, start, impossible=None):
    """A SQuAD question about "The cat sat on the mat." with one answer."""
    qa = {"id": qid, "question": "Where?", "answers": [{"text": text, "answer_start": start}] if text else []}
    if impossible is not None:
        qa["is_impossible"] = impossible
    return qa


def test_real_squad_files(data_dir):
    dev = read_examples(TASKS["squad"], data_dir / "squad/dev-v1.1.json", "dev")
    assert len(dev) == 10570 and not any(e.is_impossible for e in dev)
    assert sum(len(e.answers) for e in dev) == 34726
    skipped = []
    train = read_examples(TASKS["squad_v2"], data_dir / "squad/train-v2.0.subset-first10articles.json", "train", skipped)
    assert len(train) == 4719 and sum(not e.is_impossible for e in train) == 4371 and skipped == []
    assert train[0].qid == "56be85543aeaaa14008c9063" and train[0].question == "When did Beyonce start becoming popular?"
    assert all(e.answers == [] for e in train if e.is_impossible)
    answer = train[0].answers[0]
    assert train[0].context[answer["answer_start"]:].startswith(answer["text"])


def test_squad_v2_data_needs_the_v2_task(data_dir):
    file = data_dir / "squad/dev-v2.0.subset-Normans-Rhine.json"
    assert len(read_squad(TASKS["squad_v2"], file, "dev")) == 706
    with raises(f"{file}: question [0-9a-f]+: the question is unanswerable \\(is_impossible\\), "
                "which squad does not allow: use the task squad_v2"):
        read_squad(TASKS["squad"], file, "dev")


def test_squad_answer_offsets_are_checked_for_training_only(tmp_path):
    file = squad_file(tmp_path, [question("q1", "mat", 19), question("q2", "mat", 3), question("q3", "cat", 4)])
    skipped = []
    assert [e.qid for e in read_squad(TASKS["squad"], file, "train", skipped)] == ["q1", "q3"]
    assert skipped == ["q2"]
    assert [e.qid for e in read_squad(TASKS["squad"], file, "dev")] == ["q1", "q2", "q3"]


def test_squad_unanswerable_questions(tmp_path):
    file = squad_file(tmp_path, [question("q1", "mat", 19, impossible=False), question("q2", None, 0, impossible=True)])
    examples = read_squad(TASKS["squad_v2"], file, "train")
    assert [(e.qid, e.is_impossible, e.answers) for e in examples] == [
        ("q1", False, [{"text": "mat", "answer_start": 19}]), ("q2", True, [])]


def test_squad_errors(tmp_path):
    file = write(tmp_path / "dev.json", '{"data": [\n  {"title": "x",}\n]}')
    with raises(f"{file}: not valid JSON \\(line 2 column 17: Expecting property name enclosed in double quotes\\)"):
        read_squad(TASKS["squad"], file, "dev")
    file = squad_file(tmp_path, [{"id": "q1", "answers": []}])
    with raises(f"{file}: question q1: missing key 'question'"):
        read_squad(TASKS["squad"], file, "dev")
    file = squad_file(tmp_path, [{"question": "Who?", "answers": []}])
    with raises(f"{file}: data\\[0\\].paragraphs\\[0\\].qas\\[0\\]: missing key 'id'"):
        read_squad(TASKS["squad"], file, "dev")
    file = write(tmp_path / "dev.json", json.dumps({"data": [{"title": "x", "paragraphs": []}, {"title": "y"}]}))
    with raises(f"{file}: data\\[1\\]: missing key 'paragraphs'"):
        read_squad(TASKS["squad"], file, "dev")
    file = squad_file(tmp_path, [question("q1", None, 0)])
    with raises(f"{file}: question q1: no answers, and the question is not marked is_impossible"):
        read_squad(TASKS["squad"], file, "dev")
    file = squad_file(tmp_path, [question("q1", "mat", "19")])
    with raises(f"{file}: question q1: key 'answer_start' should hold an integer"):
        read_squad(TASKS["squad"], file, "dev")
    file = squad_file(tmp_path, [question("q1", "mat", 19), question("q1", "cat", 4)])
    with raises(f"{file}: question q1: duplicate question id"):
        read_squad(TASKS["squad"], file, "dev")


# --- writing predictions ----------------------------------------------------------------


def test_write_glue_predictions(tmp_path):
    examples = [SequenceExample(guid, "x", "y", None, "test.tsv:2") for guid in ("0", "1", "5")]
    write_glue_predictions(TASKS["rte"], examples, [1, 0, 1], tmp_path / "RTE.tsv")
    assert (tmp_path / "RTE.tsv").read_text() == "index\tprediction\n0\tnot_entailment\n1\tentailment\n5\tnot_entailment\n"
    write_glue_predictions(TASKS["stsb"], examples, [4.12345, 0.0, 5], tmp_path / "STS-B.tsv")
    assert (tmp_path / "STS-B.tsv").read_text() == "index\tprediction\n0\t4.123\n1\t0.000\n5\t5.000\n"


def test_write_conll_predictions(tmp_path):
    file = write(tmp_path / "test.txt", "Peter NNP I-NP B-PER\nlives VBZ I-VP O\n\nBonn NNP I-NP B-LOC\n")
    examples = read_conll(TASKS["conll2003"], file)
    write_conll_predictions(examples, [["B-PER", "B-LOC"], ["B-ORG"]], tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_text() == "Peter B-PER B-PER\nlives O B-LOC\n\nBonn B-LOC B-ORG\n\n"
    examples[0].tags = None
    write_conll_predictions(examples[:1], [["B-PER", "O"]], tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_text() == "Peter B-PER\nlives O\n\n"


def test_write_squad_predictions(tmp_path):
    predictions = {"56be4db0acb8001400a502ec": "Denver Broncos", "5a8d7bf7df8bba001a0f9ab1": ""}
    write_squad_predictions(predictions, tmp_path / "predictions.json")
    assert json.loads((tmp_path / "predictions.json").read_text()) == predictions


def test_error_messages_are_one_line(tmp_path):
    file = write(tmp_path / "dev.tsv", "sentence\tlabel\n" + "x" * 500 + "\t1\textra\n")
    with pytest.raises(UserError) as error:
        read_glue(TASKS["sst2"], file, "dev")
    assert re.fullmatch(r".*dev\.tsv:2: [^\n]*", str(error.value))
