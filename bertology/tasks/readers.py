"""Fine-tuning tasks: what each one is, and readers and writers of their official file formats.

| tasks | kind | format read | paper |
|---|---|---|---|
| cola sst2 mrpc stsb qqp mnli qnli rte wnli | sequence (one sentence or a pair) | GLUE TSV | Wang et al. 2019, "GLUE" |
| conll2003 | token (named entities, IOB2 tags) | CoNLL columns | Tjong Kim Sang & De Meulder 2003 |
| squad, squad_v2 | span (extractive QA) | SQuAD JSON | Rajpurkar et al. 2016, 2018 |
| wic | wic (a pair, a target word in each: same sense?) | WiC's X.data.txt, X.gold.txt | Pilehvar & Camacho-Collados 2019 |
| `generic_task(...)` | sequence, from the user's own CSV, TSV or JSONL | table | |

A `TaskSpec` says what a task predicts (its labels, or a score for regression), which
metrics it reports and where its files' fields are. `task_files` finds a split's file in a
task folder, `read_examples` reads it into examples (`SequenceExample`, `TokenExample`,
`SpanExample`, `WicExample`), and the `write_*_predictions` functions write predictions in the format
each benchmark's scorer or leaderboard expects.

Every mistake in an input file raises `UserError` with a one-line message that names the
file and, where the format has lines, the line: `dev.tsv:17: expected 2 tab-separated
columns, got 3`. This module imports neither PyTorch nor NumPy, so it loads fast."""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from ..files import loads_json, write_json_atomic, write_text_atomic
from ..text import SNIFF_BYTES, is_invisible, replace_controls, sniff_encoding, split_lines


@dataclass(frozen=True)
class Columns:
    """Where a table's fields are, by the column names of its header line."""

    text_a: str
    text_b: str | None = None  # pair tasks only
    label: str = "label"  # test files may lack it: their examples get label None
    guid: str | None = None  # an id column, kept as the example's guid (GLUE submissions need it)
    headerless: tuple[str, ...] | None = None  # column names of files that have no header line (CoLA's train and dev)


@dataclass(frozen=True)
class TaskSpec:
    """What a fine-tuning task predicts, how it is scored and how its files are read."""

    name: str
    kind: str  # "sequence" (one sentence or a pair), "token", "span" or "wic" (a pair, a target word in each)
    labels: tuple[str, ...] | None  # class names in id order; None for regression, span tasks, and labels yet to be discovered
    metrics: tuple[str, ...]  # the metric keys reported (see tasks/metrics.py)
    main_metric: str  # the one that picks the best checkpoint
    pair: bool = False  # sequence tasks: text_a and text_b
    regression: bool = False  # sequence tasks: a float score instead of a class
    label_range: tuple[float, float] | None = None  # regression scores must lie in it (STS-B: 0 to 5)
    unanswerable: bool = False  # span tasks: questions may have no answer (SQuAD 2.0)
    format: str = "glue"  # the reader: "glue", "table", "conll", "squad" or "wic"
    columns: Columns | None = None  # "glue" and "table" formats
    # split -> file names looked for in a task folder, the first found wins (a dict: kept out of the hash)
    files: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    # splits scored during fine-tuning; another split's metrics are reported as "<metric>_<split less 'dev_'>"
    eval_splits: tuple[str, ...] = ("dev",)


GLUE_FILES = {"train": ("train.tsv",), "dev": ("dev.tsv",), "test": ("test.tsv",)}


MNLI_FILES = {
    "train": ("train.tsv",),
    "dev": ("dev_matched.tsv",),
    "dev_mismatched": ("dev_mismatched.tsv",),
    "test": ("test_matched.tsv",),
    "test_mismatched": ("test_mismatched.tsv",),
}


CONLL_FILES = {
    "train": ("train.txt", "eng.train"),
    "dev": ("valid.txt", "dev.txt", "eng.testa"),
    "test": ("test.txt", "eng.testb"),
}


# WiC: X.data.txt holds the pairs, X.gold.txt beside it their labels (see `wic_gold_file`).
WIC_FILES = {split: (f"{split}.data.txt",) for split in ("train", "dev", "test")}


BINARY = ("0", "1")


ENTAILMENT = ("entailment", "not_entailment")


CONLL_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")


def _glue(name: str, columns: Columns, labels: tuple[str, ...] | None, metrics: tuple[str, ...], main_metric: str,
          files: Mapping[str, tuple[str, ...]] = GLUE_FILES, **options) -> TaskSpec:
    """A GLUE task: a sequence task read from GLUE's TSV files."""
    return TaskSpec(
        name, "sequence", labels, metrics, main_metric, pair=columns.text_b is not None,
        format="glue", columns=columns, files=files, **options,
    )


def _squad(name: str, version: str, unanswerable: bool) -> TaskSpec:
    """SQuAD v1.1 or v2.0."""
    files = {"train": (f"train-v{version}.json",), "dev": (f"dev-v{version}.json",)}
    return TaskSpec(name, "span", None, ("exact_match", "f1"), "f1", unanswerable=unanswerable, format="squad", files=files)


# Columns are named as in the header lines of the official GLUE files (those of
# download_glue_data.py); test files have an id column ("index", QQP's "id") and no label.
# MRPC and QQP pick checkpoints by F1: the GLUE leaderboard scores them by the mean of F1 and
# accuracy, and on their skewed classes F1 is the one that accuracy alone can hide.
TASKS: dict[str, TaskSpec] = {
    "cola": _glue("cola", Columns("sentence", guid="index", headerless=("source", "label", "author_label", "sentence")),
                  BINARY, ("mcc", "accuracy"), "mcc"),
    "sst2": _glue("sst2", Columns("sentence", guid="index"), BINARY, ("accuracy",), "accuracy"),
    "mrpc": _glue("mrpc", Columns("#1 String", "#2 String", "Quality", guid="index"), BINARY, ("accuracy", "f1"), "f1"),
    "stsb": _glue("stsb", Columns("sentence1", "sentence2", "score", guid="index"), None, ("pearson", "spearman"),
                  "spearman", regression=True, label_range=(0.0, 5.0)),
    "qqp": _glue("qqp", Columns("question1", "question2", "is_duplicate", guid="id"), BINARY, ("accuracy", "f1"), "f1"),
    # Label order of BERT's MnliProcessor (and so of checkpoints fine-tuned with it).
    "mnli": _glue("mnli", Columns("sentence1", "sentence2", "gold_label", guid="index"),
                  ("contradiction", "entailment", "neutral"), ("accuracy", "accuracy_mismatched"),
                  "accuracy", files=MNLI_FILES, eval_splits=("dev", "dev_mismatched")),
    "qnli": _glue("qnli", Columns("question", "sentence", guid="index"), ENTAILMENT, ("accuracy",), "accuracy"),
    "rte": _glue("rte", Columns("sentence1", "sentence2", guid="index"), ENTAILMENT, ("accuracy",), "accuracy"),
    "wnli": _glue("wnli", Columns("sentence1", "sentence2", guid="index"), BINARY, ("accuracy",), "accuracy"),
    "conll2003": TaskSpec("conll2003", "token", CONLL_TAGS, ("precision", "recall", "f1", "accuracy"), "f1",
                          format="conll", files=CONLL_FILES),
    "squad": _squad("squad", "1.1", unanswerable=False),
    "squad_v2": _squad("squad_v2", "2.0", unanswerable=True),
    # Labels as the gold files write them: F (different senses), T (the same sense).
    "wic": TaskSpec("wic", "wic", ("F", "T"), ("accuracy",), "accuracy", format="wic", files=WIC_FILES),
}


GENERIC_KINDS = ("classification", "pair-classification", "regression", "pair-regression")


TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl")


def generic_task(
    kind: str,
    labels: Sequence[str] | None = None,
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str = "label",
    name: str = "custom",
) -> TaskSpec:
    """A sequence task over the user's own CSV, TSV or JSONL files.

    Args:
        kind: "classification", "pair-classification", "regression" or "pair-regression".
        labels: class names in id order. None for classification means "any label": read the
            training file, then make the task again with `labels_from_examples(examples)`.
        text_column, text_pair_column, label_column: the column (JSONL: field) names; a pair
            task's second text defaults to "text_pair".
        name: the task's name in messages.

    Classification reports accuracy and Matthews correlation (both defined for any number of
    classes), regression Spearman and Pearson correlation; the first is the main metric.
    Files in a folder are found as train/dev/test with any of the suffixes .csv, .tsv, .jsonl.
    """
    if kind not in GENERIC_KINDS:
        raise UserError(f"unknown task kind {kind!r}: use one of {', '.join(GENERIC_KINDS)}")
    regression = kind.endswith("regression")
    if regression and labels is not None:
        raise UserError(f"a {kind} task has no labels, got {', '.join(labels)}")
    pair = kind.startswith("pair-")
    columns = Columns(text_column, (text_pair_column or "text_pair") if pair else None, label_column)
    metrics = ("spearman", "pearson") if regression else ("accuracy", "mcc")
    files = {split: tuple(split + suffix for suffix in TABLE_SUFFIXES) for split in ("train", "dev", "test")}
    return TaskSpec(
        name, "sequence", None if labels is None else tuple(labels), metrics, metrics[0],
        pair=pair, regression=regression, format="table", columns=columns, files=files,
    )


def labels_from_examples(examples: Iterable[SequenceExample]) -> tuple[str, ...]:
    """The distinct labels of `examples`, sorted: numerically when all are integers ("2" before "10").

    Raises:
        UserError: no example has a label.
    """
    found = {example.label for example in examples if example.label is not None}
    if not found:
        raise UserError("the training examples have no labels")
    if all(re.fullmatch(r"-?\d+", str(label)) for label in found):
        return tuple(sorted(found, key=int))
    return tuple(sorted(found))


@dataclass
class SequenceExample:
    """One sentence or sentence pair with its class name, its score (regression) or None (test)."""

    guid: str  # the file's id column, else the 0-based row number
    text_a: str
    text_b: str | None
    label: str | float | None
    where: str  # "file:line", for messages


@dataclass
class TokenExample:
    """One sentence as words, with one IOB2 tag per word."""

    guid: str  # the 0-based sentence number
    words: list[str]
    tags: list[str] | None
    where: str  # "file:line" of the first word


@dataclass
class SpanExample:
    """One SQuAD question: the answers are spans of the context (none when `is_impossible`)."""

    qid: str
    question: str
    context: str
    answers: list[dict]  # [{"text": str, "answer_start": int (a character offset into context)}]
    is_impossible: bool
    where: str  # "file: question <qid>", for messages


@dataclass
class WicExample:
    """One Word-in-Context pair: a target word in two sentences, same sense or not."""

    word: str  # the target's lemma
    pos: str  # "N" or "V"
    sentences: tuple[list[str], list[str]]  # each sentence's space-separated tokens
    positions: tuple[int, int]  # the target's token index in each
    same_sense: bool | None  # None: no gold labels (a test file)
    source: str  # "file:line", for error messages

    @property
    def label(self) -> str | None:
        """The gold file's letter, the task's label: "T" (same sense), "F", or None without gold."""
        return None if self.same_sense is None else "T" if self.same_sense else "F"

    @property
    def where(self) -> str:
        """The pair's "file:line", the name every task example gives its place by."""
        return self.source


Example = SequenceExample | TokenExample | SpanExample | WicExample


def task_files(spec: TaskSpec, path: str | Path, splits: Sequence[str]) -> dict[str, Path]:
    """Find the file of each split in `splits` ("train", "dev", "test", MNLI's "dev_mismatched", ...).

    `path` is a task folder (GLUE: train.tsv, dev.tsv, test.tsv; MNLI: dev_matched.tsv for
    "dev"; CoNLL: train.txt, valid.txt or eng.testa for "dev"; WiC: dev.data.txt, ...; see `TaskSpec.files`) or
    a single file, which is then used for every split asked.

    Raises:
        UserError: `path` does not exist, the task has no such split, or the folder lacks its
            file (the message names the file names looked for).
    """
    path = Path(path)
    if path.is_file():
        return {split: path for split in splits}
    if not path.is_dir():
        raise UserError(f"{path}: no such file or folder")
    found = {}
    for split in splits:
        if split not in spec.files:
            raise UserError(f"task {spec.name} has no split {split!r} (splits: {', '.join(spec.files)})")
        names = spec.files[split]
        found[split] = next((path / name for name in names if (path / name).is_file()), None)
        if found[split] is None:
            raise UserError(f"{path}: no {split} file for {spec.name} (looked for {', '.join(names)})")
    return found


def read_examples(spec: TaskSpec, file: str | Path, split: str, skipped: list[str] | None = None) -> list[Example]:
    """Read one split's file with the reader of the task's format.

    Args:
        spec: the task.
        file: the file (see `task_files`).
        split: "train", "dev", "test", ...; only test files may lack labels, and only
            training questions of SQuAD are checked for answer offsets.
        skipped: SQuAD only: the ids of training questions left out are appended here (see
            `read_squad`).

    WiC's `file` is the data file; its labels are read from the gold file beside it (see
    `wic_gold_file`).

    Raises:
        UserError: the file is missing, malformed or holds no examples.
    """
    if spec.format == "glue":
        return read_glue(spec, file, split)
    if spec.format == "table":
        return read_table(spec, file, split)
    if spec.format == "conll":
        return read_conll(spec, file)
    if spec.format == "squad":
        return read_squad(spec, file, split, skipped)
    if spec.format == "wic":
        return read_wic(file, wic_gold_file(file, split))
    raise ValueError(f"unknown task format {spec.format!r}")


def _read_text(file: Path) -> str:
    """The whole file as text by the rules of text.py: UTF-8 (or UTF-16/32 with a byte order
    mark), without the mark, every line end made LF, control characters replaced by spaces
    (one for one, so SQuAD's character offsets still hold).

    Raises:
        UserError: the file cannot be read, or `file:line: not valid UTF-8` (or UTF-16/32).
    """
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{file}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{file}: is a folder, expected a file") from None
    except OSError as error:
        raise UserError(f"{file}: cannot read ({error.strerror})") from None
    try:
        encoding, mark = sniff_encoding(data[:SNIFF_BYTES])
    except ValueError as error:
        raise UserError(f"{file}: {error}") from None
    try:
        text = data[mark:].decode(encoding)
    except UnicodeDecodeError as error:
        line = data[:error.start + mark].decode(encoding, "replace").count("\n") + 1
        raise UserError(f"{file}:{line}: not valid {encoding.upper()[:6]}") from None
    return replace_controls("\n".join(split_lines(text)).removeprefix("\ufeff"))[0]


def _numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) pairs of `_read_text`'s text, whose lines all end in LF.

    Splits at "\\n" only: `str.splitlines` would also split inside fields at characters such as
    U+2028 or U+0085, which sentences in these data sets do contain.
    """
    return enumerate(text.split("\n"), start=1)


def read_text_lines(file: str | Path) -> list[tuple[int, str]]:
    """(line number, line) for every non-blank line of a UTF-8 text file, without line endings.

    The tables' readers use it, and so does `predict` for plain-text input.

    Raises:
        UserError: the file cannot be read, `file:line: not valid UTF-8`, or `file: no examples`
            (no text at all).
    """
    file = Path(file)
    return _nonempty([(number, line) for number, line in _numbered_lines(_read_text(file)) if line.strip()], file)


def _nonempty(examples: list, file: Path) -> list:
    """`examples`, unless there are none."""
    if not examples:
        raise UserError(f"{file}: no examples")
    return examples


def read_wic(data_file: str | Path, gold_file: str | Path | None) -> list[WicExample]:
    """WiC's official files (Pilehvar and Camacho-Collados 2019): `X.data.txt` lines `lemma <TAB>
    N|V <TAB> i1-i2 <TAB> sentence 1 <TAB> sentence 2` (tokens separated by spaces, i1 and i2 the
    target's token index in each) and `X.gold.txt` lines `T` or `F`, line by line. With no
    `gold_file` (test data) every example's `same_sense` is None.

    Raises:
        UserError: the two files' line counts differ, or a line is malformed (naming file and line).
    """
    data_file = Path(data_file)
    rows = read_text_lines(data_file)
    golds = [(None, None)] * len(rows) if gold_file is None else read_text_lines(gold_file)
    if len(rows) != len(golds):
        extra = (f"{data_file.name}:{rows[len(golds)][0]} has no label" if len(golds) < len(rows)
                 else f"{Path(gold_file).name}:{golds[len(rows)][0]} labels no pair")
        raise UserError(f"{gold_file}: {len(golds):,} labels for the {len(rows):,} pairs of {data_file.name}; "
                        f"{extra} (line n of the gold file labels line n of the data file)")
    examples = []
    for (number, line), (gold_number, gold) in zip(rows, golds):
        where = f"{data_file}:{number}"
        fields = line.split("\t")
        if len(fields) != 5:
            raise UserError(f"{where}: expected 5 tab-separated fields (word, N|V, i1-i2, sentence 1, sentence 2), "
                            f"got {len(fields)}")
        word, pos, indices, first, second = fields
        sentences = (first.split(" "), second.split(" "))
        try:
            positions = tuple(int(i) for i in indices.split("-"))
        except ValueError:
            positions = ()
        if len(positions) != 2 or not all(0 <= i < len(s) for i, s in zip(positions, sentences)):
            raise UserError(f"{where}: {indices!r} is not two token indexes i1-i2 within the sentences")
        if gold is not None and gold.strip() not in ("T", "F"):
            raise UserError(f"{gold_file}:{gold_number}: expected T or F, got {gold.strip()[:20]!r}")
        same_sense = None if gold is None else gold.strip() == "T"
        examples.append(WicExample(word, pos, sentences, positions, same_sense, where))
    return examples


def wic_gold_file(data_file: str | Path, split: str) -> Path | None:
    """The gold file of a WiC data file: `X.gold.txt` beside `X.data.txt`, as the official release
    names them; None for test data that has none.

    Raises:
        UserError: a training or dev file without its gold file beside it (naming the file
            looked for), or not named `X.data.txt`.
    """
    data_file = Path(data_file)
    gold = None
    if data_file.name.endswith(".data.txt"):
        gold = data_file.with_name(data_file.name.removesuffix(".data.txt") + ".gold.txt")
        if gold.is_file():
            return gold
    if split == "test":
        return None
    if gold is None:
        raise UserError(f"{data_file}: a WiC data file is named X.data.txt, with its T/F labels in X.gold.txt "
                        "beside it")
    raise UserError(f"{gold}: no such file (the T/F labels of {data_file.name}, one a line; only test data may "
                    "come without)")


def read_glue(spec: TaskSpec, file: str | Path, split: str) -> list[SequenceExample]:
    """Read a GLUE TSV file (train, dev or test) into sequence examples.

    Columns are found by their names in the header line (`spec.columns`); CoLA's train and
    dev files have no header and take `Columns.headerless` names. Lines are split at tabs with
    no quoting, as GLUE's own readers do: its sentences hold unbalanced quotes (MRPC's
    strings start with `"`). Blank lines are skipped.

    Raises:
        UserError: `file:line: expected N tab-separated columns, got M`, a missing column,
            an unknown label (`file:line: label 'x' is not one of 0, 1`), a score that is not
            a number in range, invalid UTF-8, or `file: no examples`.
    """
    file = Path(file)
    return _nonempty(_table_examples(spec, file, split, _tsv_rows(file), "tab-separated"), file)


def read_table(spec: TaskSpec, file: str | Path, split: str) -> list[SequenceExample]:
    """Read the user's own table (see `generic_task`), in a format chosen by the file's suffix.

    - .csv: comma-separated with a header line, quoted fields allowed (Python's csv module).
    - .tsv: tab-separated with a header line, no quoting (as GLUE).
    - .jsonl: one JSON object per line, with fields named as the columns.

    Raises:
        UserError: an unknown suffix, a missing column (the message lists those present), a
            malformed line, a label that is not one of the task's labels or not a number
            (regression), or `file: no examples`.
    """
    file = Path(file)
    if file.suffix == ".jsonl":
        examples = _jsonl_examples(spec, file, split)
    elif file.suffix == ".csv":
        examples = _table_examples(spec, file, split, _csv_rows(file), "comma-separated")
    elif file.suffix == ".tsv":
        examples = _table_examples(spec, file, split, _tsv_rows(file), "tab-separated")
    else:
        raise UserError(f"{file}: unknown table format: name it .csv, .tsv or .jsonl")
    return _nonempty(examples, file)


def _tsv_rows(file: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each non-blank line of a TSV file."""
    for number, line in read_text_lines(file):
        yield number, line.split("\t")


def _csv_rows(file: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each non-blank record of a CSV file; a record's number is its last line's."""
    reader = csv.reader(io.StringIO(_read_text(file), newline=""))
    try:
        for fields in reader:
            if fields:
                yield reader.line_num, fields
    except csv.Error as error:
        raise UserError(f"{file}:{reader.line_num}: {error}") from None


def _table_examples(
    spec: TaskSpec, file: Path, split: str, rows: Iterator[tuple[int, list[str]]], separated: str
) -> list[SequenceExample]:
    """Examples from the rows of a table, the first row being its header (unless the task has headerless files)."""
    columns = spec.columns
    first = next(rows, None)
    if first is None:
        return []
    number, header = first
    header = [name.strip() for name in header]
    if columns.text_a not in header and columns.headerless:
        header, rows = list(columns.headerless), itertools.chain([first], rows)
    index = _column_indexes(spec, file, number, header, split)
    examples = []
    for number, fields in rows:
        if len(fields) != len(header):
            raise UserError(f"{file}:{number}: expected {len(header)} {separated} columns, got {len(fields)}")
        where = f"{file}:{number}"
        label = None if index["label"] is None else _parse_label(spec, fields[index["label"]], where)
        examples.append(SequenceExample(
            guid=str(len(examples)) if index["guid"] is None else fields[index["guid"]],
            text_a=_visible(fields[index["text_a"]], f"column {columns.text_a!r}", where),
            text_b=None if index["text_b"] is None else _visible(fields[index["text_b"]], f"column {columns.text_b!r}",
                                                                 where),
            label=label,
            where=where,
        ))
    return examples


def _visible(text: str, what: str, where: str) -> str:
    """`text`, unless nothing in it is visible (empty, spaces, zero-width characters): then a
    one-line error naming `what` ("column 'sentence'") at `where` (file:line)."""
    if is_invisible(text):
        raise UserError(f"{where}: {what} has no visible text ({json.dumps(text)[:40]})")
    return text


def _column_indexes(spec: TaskSpec, file: Path, line: int, header: list[str], split: str) -> dict[str, int | None]:
    """Field name ("text_a", "text_b", "label", "guid") -> its column in `header`, None where absent and optional."""
    columns = spec.columns
    required = {"text_a": columns.text_a, "text_b": columns.text_b}
    if split != "test":  # only test files may come without labels
        required["label"] = columns.label
    for name in required.values():
        if name is not None and name not in header:
            shown = ", ".join(header)
            shown = shown if len(shown) <= 200 else shown[:200] + "..."
            raise UserError(f"{file}:{line}: no column {name!r} (columns: {shown})")
    wanted = {"text_a": columns.text_a, "text_b": columns.text_b, "label": columns.label, "guid": columns.guid}
    return {key: header.index(name) if name in header else None for key, name in wanted.items()}


def json_object(line: str, where: str) -> dict:
    """One JSONL line as a dict, or a one-line UserError naming `where` (file:line)."""
    try:
        record = loads_json(line)
    except json.JSONDecodeError as error:
        raise UserError(f"{where}: not valid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(record, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(record).__name__}")
    return record


def _jsonl_examples(spec: TaskSpec, file: Path, split: str) -> list[SequenceExample]:
    """Examples from a JSONL file: one object per non-blank line."""
    columns = spec.columns
    examples = []
    for number, line in read_text_lines(file):
        where = f"{file}:{number}"
        record = json_object(line, where)
        text_a = _text_field(record, columns.text_a, where)
        text_b = None if columns.text_b is None else _text_field(record, columns.text_b, where)
        if columns.label not in record and split != "test":
            raise UserError(f"{where}: no field {columns.label!r} (fields: {', '.join(record)})")
        label = _parse_label(spec, record[columns.label], where) if columns.label in record else None
        examples.append(SequenceExample(str(len(examples)), text_a, text_b, label, where))
    return examples


def _text_field(record: dict, name: str, where: str) -> str:
    """A JSONL record's text field, which must be there and be a string."""
    if name not in record:
        raise UserError(f"{where}: no field {name!r} (fields: {', '.join(record)})")
    if not isinstance(record[name], str):
        raise UserError(f"{where}: field {name!r} should be a string, got {json.dumps(record[name])[:50]}")
    return _visible(replace_controls(record[name])[0], f"field {name!r}", where)  # JSON's \\u0000 escapes


def _parse_label(spec: TaskSpec, raw: object, where: str) -> str | float:
    """A class name (checked against the task's labels) or, for regression, a finite float (checked against its range)."""
    if spec.regression:
        return _parse_score(spec, raw, where)
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):  # JSONL: 1 is read as "1", 1.0 or true is refused
        raise UserError(f"{where}: label {json.dumps(raw)[:50]} should be a string or an integer")
    label = str(raw).strip()
    if spec.labels is not None and label not in spec.labels:
        raise UserError(f"{where}: label {label!r} is not one of {', '.join(spec.labels)}")
    if not label:
        raise UserError(f"{where}: empty label")
    return label


def _parse_score(spec: TaskSpec, raw: object, where: str) -> float:
    """A regression label: a finite number within the task's range."""
    low, high = spec.label_range or (-math.inf, math.inf)
    wanted = "a number" if spec.label_range is None else f"a number from {low:g} to {high:g}"
    try:
        score = math.nan if isinstance(raw, bool) else float(raw)
    except (TypeError, ValueError):
        score = math.nan
    if not (math.isfinite(score) and low <= score <= high):
        raise UserError(f"{where}: label {str(raw)[:50]!r} is not {wanted}")
    return score


# Columns are separated by spaces or tabs; str.split() would also cut words at no-break spaces.
_CONLL_SEPARATOR = re.compile(r"[ \t]+")


def read_conll(spec: TaskSpec, file: str | Path) -> list[TokenExample]:
    """Read a CoNLL-2003 style file: one `word ... TAG` line per token, blank lines between sentences.

    The word is the first column and the tag the last (CoNLL-2003 has `word POS chunk NER`);
    `-DOCSTART-` lines are skipped. Tags may be IOB1 (CoNLL-2003's original files, where B-
    only separates two adjacent entities of one type) or IOB2; every sentence is passed
    through `to_iob2`, which leaves IOB2 unchanged, so callers always see IOB2.

    Raises:
        UserError: `file:line: expected a word and a tag`, a tag that is not one of the
            task's labels, invalid UTF-8, or `file: no examples`.
    """
    file = Path(file)
    examples: list[TokenExample] = []
    words: list[str] = []
    tags: list[str] = []
    first_line = 0

    def end_sentence() -> None:
        if words:
            examples.append(TokenExample(str(len(examples)), list(words), to_iob2(tags), f"{file}:{first_line}"))
            words.clear()
            tags.clear()

    for number, line in _numbered_lines(_read_text(file)):
        fields = _CONLL_SEPARATOR.split(line.strip(" \t"))
        if fields == [""] or fields[0] == "-DOCSTART-":
            end_sentence()
            continue
        if len(fields) < 2:
            raise UserError(f"{file}:{number}: expected a word and a tag")
        _visible(fields[0], "the word", f"{file}:{number}")
        if spec.labels is not None and fields[-1] not in spec.labels:
            raise UserError(f"{file}:{number}: tag {fields[-1]!r} is not one of {', '.join(spec.labels)}")
        if not words:
            first_line = number
        words.append(fields[0])
        tags.append(fields[-1])
    end_sentence()
    return _nonempty(examples, file)


def to_iob2(tags: Sequence[str]) -> list[str]:
    """Convert one sentence's IOB1 tags to IOB2: an I-X that starts an entity becomes B-X.

    >>> to_iob2(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"])
    ['B-PER', 'I-PER', 'O', 'B-LOC', 'B-LOC', 'B-ORG']
    """
    converted = []
    for i, tag in enumerate(tags):
        # An entity of type X continues only after B-X or I-X; "O"[2:] is "", never a type.
        if tag.startswith("I-") and (i == 0 or tags[i - 1][2:] != tag[2:]):
            tag = "B-" + tag[2:]
        converted.append(tag)
    return converted


def read_squad(spec: TaskSpec, file: str | Path, split: str, skipped: list[str] | None = None) -> list[SpanExample]:
    """Read a SQuAD v1.1 or v2.0 JSON file (`data[].paragraphs[].qas[]`) into span examples.

    Training questions whose `answer_start` does not point at their answer text in the
    context are left out, as SQuAD's reference training code does; their ids are appended to
    `skipped` so the caller can say how many. Other splits keep every question: scoring uses
    the answer texts only, never the offsets. v2.0's unanswerable questions
    (`is_impossible`) get no answers (their `plausible_answers` are dropped).

    Raises:
        UserError: `file: not valid JSON (line L column C: msg)`, a missing or mistyped key
            (naming the article index or question id), an answerable question with no
            answers, a duplicate question id, an unanswerable question in a task without
            them (SQuAD 1.1), or `file: no examples`.
    """
    file = Path(file)
    try:
        root = loads_json(_read_text(file))
    except json.JSONDecodeError as error:
        raise UserError(f"{file}: not valid JSON (line {error.lineno} column {error.colno}: {error.msg})") from None
    examples: list[SpanExample] = []
    seen: set[str] = set()
    for a, article in enumerate(_key(root, "data", list, f"{file}")):
        for p, paragraph in enumerate(_key(article, "paragraphs", list, f"{file}: data[{a}]")):
            where = f"{file}: data[{a}].paragraphs[{p}]"
            context = _visible_key(paragraph, "context", where)
            for q, qa in enumerate(_key(paragraph, "qas", list, where)):
                example = _squad_example(spec, qa, context, f"{where}.qas[{q}]", file)
                if example.qid in seen:
                    raise UserError(f"{example.where}: duplicate question id")
                seen.add(example.qid)
                if split == "train" and not all(_answer_matches(context, answer) for answer in example.answers):
                    if skipped is not None:
                        skipped.append(example.qid)
                    continue
                examples.append(example)
    return _nonempty(examples, file)


def _squad_example(spec: TaskSpec, qa: object, context: str, position: str, file: Path) -> SpanExample:
    """One question of a SQuAD paragraph; `position` ("file: data[a].paragraphs[p].qas[q]") names it until its id is known."""
    qid = _key(qa, "id", str, position)
    where = f"{file}: question {qid}"
    question = _visible_key(qa, "question", where)
    is_impossible = qa.get("is_impossible", False)
    if not isinstance(is_impossible, bool):
        raise UserError(f"{where}: key 'is_impossible' should be true or false")
    if is_impossible and not spec.unanswerable:
        raise UserError(f"{where}: the question is unanswerable (is_impossible), which {spec.name} does not allow: "
                        "use the task squad_v2")
    answers = [] if is_impossible else [_answer(answer, where) for answer in _key(qa, "answers", list, where)]
    if not is_impossible and not answers:
        raise UserError(f"{where}: no answers, and the question is not marked is_impossible")
    return SpanExample(qid, question, context, answers, is_impossible, where)


def _answer(answer: object, where: str) -> dict:
    """{"text", "answer_start"} of one gold answer."""
    return {"text": _visible_key(answer, "text", where), "answer_start": _key(answer, "answer_start", int, where)}


def _answer_matches(context: str, answer: dict) -> bool:
    """Whether the answer's text is found in the context at its answer_start."""
    start = answer["answer_start"]
    return start >= 0 and context[start:start + len(answer["text"])] == answer["text"]


def _visible_key(obj: object, key: str, where: str) -> str:
    """obj[key], a string with something visible in it, control characters (JSON's \\u0000
    escapes) replaced by spaces one for one, so answer offsets still hold."""
    return _visible(replace_controls(_key(obj, key, str, where))[0], f"key {key!r}", where)


def _key(obj: object, key: str, kind: type, where: str):
    """obj[key], checked to be a JSON object's key holding a value of type `kind`."""
    if not isinstance(obj, dict):
        raise UserError(f"{where}: expected a JSON object")
    if key not in obj:
        raise UserError(f"{where}: missing key {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):  # JSON's true is a Python int too
        names = {list: "a list", str: "a string", int: "an integer"}
        raise UserError(f"{where}: key {key!r} should hold {names[kind]}")
    return value


def write_glue_predictions(
    spec: TaskSpec, examples: Sequence[SequenceExample], predictions: Sequence[int | float], path: str | Path
) -> None:
    """Write a GLUE submission file: a header `index\\tprediction`, then one row per example.

    Args:
        spec: the task.
        examples: the examples predicted (a test file's, whose guids are its index column).
        predictions: class ids (written as their label names) or, for regression, scores
            (written with 3 decimals).
        path: the TSV to write (atomically).
    """
    if len(examples) != len(predictions):
        raise ValueError(f"{len(examples)} examples but {len(predictions)} predictions")
    rows = ["index\tprediction"]
    for example, prediction in zip(examples, predictions):
        shown = f"{float(prediction):.3f}" if spec.regression else spec.labels[prediction]
        rows.append(f"{example.guid}\t{shown}")
    write_text_atomic(path, "\n".join(rows) + "\n")


def write_conll_predictions(examples: Sequence[TokenExample], tags: Sequence[Sequence[str]], path: str | Path) -> None:
    """Write predicted tags in CoNLL format, the input of the conlleval script.

    One token per line, `word gold predicted` (or `word predicted` for examples without
    gold tags), and a blank line after each sentence.
    """
    if len(examples) != len(tags):
        raise ValueError(f"{len(examples)} sentences but {len(tags)} tag sequences")
    lines = []
    for example, predicted in zip(examples, tags):
        if len(predicted) != len(example.words):
            raise ValueError(f"{example.where}: {len(example.words)} words but {len(predicted)} predicted tags")
        if example.tags:
            lines += [f"{word} {gold} {tag}" for word, gold, tag in zip(example.words, example.tags, predicted)]
        else:
            lines += [f"{word} {tag}" for word, tag in zip(example.words, predicted)]
        lines.append("")
    write_text_atomic(path, "\n".join(lines) + "\n" if lines else "")


def write_wic_predictions(labels: Sequence[str], path: str | Path) -> None:
    """Write WiC predictions as its gold files hold labels: one `T` or `F` a line, in the data file's order."""
    write_text_atomic(path, "".join(f"{label}\n" for label in labels))


def write_squad_predictions(predictions: Mapping[str, str], path: str | Path) -> None:
    """Write SQuAD predictions as the official scripts read them: a JSON object {question id: answer text}.

    SQuAD 2.0's "no answer" is the empty string.
    """
    write_json_atomic(path, dict(predictions))
