"""The command line: help, version, info, tokenizer training, and one-line user errors."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from helpers import run_cli

import bertology
from bertology.models import architectures, trained_by


def test_console_script_is_installed():
    exe = shutil.which("bertology")
    if exe is None:
        pytest.skip("package not installed with pip (no console script on PATH)")
    result = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == f"bertology {bertology.__version__}"


def test_help_lists_the_commands(capsys):
    status, out, _ = run_cli(capsys, "--help")
    assert status == 0 and "tokenizer" in out and "info" in out


def test_python_dash_m_runs_the_cli():
    result = subprocess.run([sys.executable, "-m", "bertology", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("bertology ")


def test_info_describes_a_real_checkpoint(capsys, minilm_dir):
    status, out, _ = run_cli(capsys, "info", str(minilm_dir))
    assert status == 0
    assert "parameters:   22,713,216" in out
    assert "tokenizer:    wordpiece (BertTokenizer), 30,522 tokens, 30,522 embedding rows" in out
    assert "family:       bert: encoder (6 layers, 384 wide, 30,522-token vocabulary)" in out and "hidden_size: 384" in out
    assert "commands:     finetune, serve, embed, explain attention, explain senses, wic, distill (student, cut to " \
           "--student-layers), export (hf, int8, onnx)" in out


@pytest.mark.slow
def test_info_on_a_missing_directory_is_one_line(capsys, tmp_path):
    status, out, err = run_cli(capsys, "info", str(tmp_path / "nope"))
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("bertology: error:") and "nope" in err


def test_tokenizer_train_writes_a_loadable_vocabulary(capsys, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat.\nthe dog sat on the log.\n" * 50 + "고양이가 매트 위에 앉았다.\n" * 20,
                      encoding="utf-8")
    status, out, err = run_cli(capsys, "tokenizer", "train", "--corpus", str(corpus), "--vocab-size", "200",
                               "--out", str(tmp_path / "tok"))
    assert status == 0, err
    assert "vocabulary of" in out
    vocab = (tmp_path / "tok" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = bertology.Tokenizer.from_pretrained(tmp_path / "tok")
    assert tokenizer.tokenize("The cat sat.")[:2] == ["the", "cat"]


@pytest.mark.parametrize("problem", ["missing", "empty", "bad-utf8", "bad-vocab-size"])
def test_tokenizer_train_user_errors_are_one_line(capsys, tmp_path, problem):
    corpus = tmp_path / "corpus.txt"
    args = ["tokenizer", "train", "--corpus", str(corpus), "--out", str(tmp_path / "tok")]
    if problem == "empty":
        corpus.write_text("\n  \n", encoding="utf-8")
    elif problem == "bad-utf8":
        corpus.write_bytes(b"good line\n\xff\xfe bad line\n")
    elif problem == "bad-vocab-size":
        corpus.write_text("text\n", encoding="utf-8")
        args += ["--vocab-size", "0"]
    status, _, err = run_cli(capsys, *args)
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    if problem in ("missing", "empty", "bad-utf8"):
        assert "corpus.txt" in err
    if problem == "bad-utf8":
        assert "corpus.txt:2:" in err  # file:line, as compilers print it
    if problem == "bad-vocab-size":
        assert "--vocab-size" in err


# ----- flags generated from the settings ----------------------------------------------------------

def test_help_and_version_import_no_pytorch():
    code = ("import sys\nfrom bertology.cli import main\n"
            "assert main(['--help']) == 0 and main(['--version']) == 0\n"
            "assert 'torch' not in sys.modules, 'bertology --help imported torch'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_required_flags_show_as_required_and_choices_are_listed(capsys):
    status, out, _ = run_cli(capsys, "pretrain", "--help")
    usage = " ".join(out.split("\n\n")[0].split())
    assert status == 0 and "--corpus PATH [PATH ...] --out DIR" in usage
    assert "[--corpus" not in usage and "[--out" not in usage and "[--max-steps MAX_STEPS]" in usage
    assert f"--arch {{{','.join(trained_by('pretrain'))}}}" in usage  # the families it pre-trains, no more
    assert {"static", "cove", "taglm"} <= set(architectures())  # trained by their own commands
    assert "--objective {bert,roberta,albert,electra,clm,t5,bilm,plm}" in usage
    _, out, _ = run_cli(capsys, "export", "--help")
    assert "--format {hf,int8,onnx}" in out
    _, out, _ = run_cli(capsys, "finetune", "--help")
    help_of = {line.split()[0]: line for line in " ".join(out.split()).replace(" --", "\n--").splitlines()}
    assert "random seed" in help_of["--seed"] and "(default: 42)" in help_of["--seed"]
    assert "(default: 5e-05)" in help_of["--lr"] and "(default: 3)" in help_of["--epochs"]
    _, out, _ = run_cli(capsys, "distill", "--help")
    assert "--max-train-examples" in out and "--max-transfer-examples" not in out and "(default: 0.0001)" in out


def test_a_bad_value_is_one_line_naming_its_flag(capsys, tmp_path):
    base = ["finetune", "--task", "sst2", "--model", str(tmp_path), "--out", str(tmp_path / "out")]
    for flags, message in ((["--epochs", "-1"], "--epochs: must be positive, got -1"),
                           (["--batch-size", "0"], "--batch-size: must be positive, got 0"),
                           (["--warmup", "x"], "--warmup: expected a number, got 'x'"),
                           (["--precision", "fp16"], "--precision must be one of auto, fp32, bf16, got 'fp16'")):
        status, _, err = run_cli(capsys, *base, *flags)
        assert status == 2 and message in err and len(err.strip().splitlines()) == 1, (flags, err)
    status, _, err = run_cli(capsys, "pretrain", "--arch", "mamba", "--corpus", str(tmp_path), "--out",
                             str(tmp_path / "out"), "--max-steps", "1")
    assert status == 2 and f"--arch must be one of {', '.join(trained_by('pretrain'))}, got 'mamba'" in err
    assert not (tmp_path / "out").exists()
    status, _, err = run_cli(capsys, "pretrain", "--arch", "static", "--corpus", str(tmp_path), "--out",
                             str(tmp_path / "out"), "--max-steps", "1")
    assert status == 2 and f"--arch must be one of {', '.join(trained_by('pretrain'))}, got 'static'" in err


@pytest.mark.parametrize("typo, named", [(["--taks", "sst2"], "--taks"), (["--epoch", "1"], "--epoch"),
                                         (["--lr=1e-4", "--max-seq-lenght", "64"], "--max-seq-lenght")])
def test_an_unknown_flag_is_named_with_the_commands_own_help(capsys, tmp_path, typo, named):
    """Never guessed from its first letters (argparse's abbreviations), and named before a
    required flag it may have been meant as."""
    args = ["finetune", "--model", str(tmp_path), "--out", str(tmp_path / "out"), *typo]
    if named != "--taks":
        args += ["--task", "sst2"]
    status, _, err = run_cli(capsys, *args)
    assert status == 2 and err == (f"bertology finetune: error: unrecognized arguments: {named} "
                                   "(see 'bertology finetune --help')\n")
    status, _, err = run_cli(capsys, "static", "train", "--corpus", str(tmp_path), "--out", str(tmp_path), "--dim", "8")
    assert status == 2 and "unrecognized arguments: --dim (see 'bertology static train --help')" in err


def test_every_command_that_computes_takes_threads_and_so_does_the_environment(capsys, tmp_path, monkeypatch):
    import torch

    from bertology.cli import COMMANDS
    from bertology.config import Threads

    computing = [command for command in COMMANDS if command.name != "info"]
    assert all(issubclass(command.settings_class(), Threads) for command in computing)  # one declaration
    status, out, _ = run_cli(capsys, "translate", "text", "--help")
    assert status == 0 and "--threads N" in out and "$BERTOLOGY_THREADS" in out
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat.\n" * 20, encoding="utf-8")
    before = torch.get_num_threads()
    try:
        status, _, err = run_cli(capsys, "tokenizer", "train", "--corpus", corpus, "--vocab-size", "200", "--out", tmp_path / "a",
                                 "--threads", "1")
        assert status == 0 and torch.get_num_threads() == 1, err
        monkeypatch.setenv("BERTOLOGY_THREADS", "2")
        status, _, err = run_cli(capsys, "tokenizer", "train", "--corpus", corpus, "--vocab-size", "200", "--out", tmp_path / "b")
        assert status == 0 and torch.get_num_threads() == 2, err
        monkeypatch.setenv("BERTOLOGY_THREADS", "all")
        status, _, err = run_cli(capsys, "tokenizer", "train", "--corpus", corpus, "--vocab-size", "200", "--out", tmp_path / "c")
        assert status == 2 and err == "bertology: error: $BERTOLOGY_THREADS must be a positive number of threads, " \
                                      "got 'all'\n"
    finally:
        torch.set_num_threads(before)


def test_idle_threads_sleep_unless_the_user_says_otherwise(monkeypatch):
    from bertology.cli import prepare_threads

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    prepare_threads()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    prepare_threads()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_the_same_setting_has_the_same_flag_on_every_command():
    """Derived from every command's settings dataclass, so that a new command or setting that
    diverges fails here: one name means one kind of value on every command; a name some setting
    has retired (--seq-len, now --max-seq-len) is used by none; and no help text is declared under
    two names (the same setting copied and renamed)."""
    from types import NoneType

    from bertology.cli import COMMANDS
    from bertology.config import alternatives, former_keys, setting_fields, setting_types

    fields = [(command.name, field, setting_types(command.settings_class())[name])
              for command in COMMANDS for name, field in setting_fields(command.settings_class()).items()]

    def kind(hint) -> str:
        kinds = {"number" if part in (int, float) else str(part) for part in alternatives(hint) if part is not NoneType}
        return " | ".join(sorted(kinds))

    kinds: dict[str, dict[str, list[str]]] = {}
    for command, field, hint in fields:
        if not kind(hint).startswith("dict"):  # a config-file table, not a flag (pretrain's [model])
            kinds.setdefault(field.name, {}).setdefault(kind(hint), []).append(command)
    assert {name: found for name, found in kinds.items() if len(found) > 1} == {}
    retired = {old for _, field, _ in fields for old in [*field.metadata["formerly"], *former_keys(field)]}
    assert retired >= {"seq_len", "field", "max_train_pairs", "word_vectors", "static", "no_lowercase", "workers"}
    assert sorted(retired & {field.name for _, field, _ in fields}) == []
    names_of_help: dict[str, set[str]] = {}
    for _, field, _ in fields:
        names_of_help.setdefault(field.metadata["help"], set()).add(field.name)
    assert {help: names for help, names in names_of_help.items() if len(names) > 1} == {}
    # the corpus is --corpus on every command that reads one, the sequence length --max-seq-len
    assert {command for command, field, _ in fields if field.name == "corpus"} == {"tokenizer train", "pretrain",
                                                                                  "static train"}
    assert not any(field.metadata["positional"] for _, field, _ in fields if field.name == "corpus")
    assert {command for command, field, _ in fields if "seq_len" in field.name} == {
        "demo", "pretrain", "finetune", "distill", "embed"}
    assert all(field.name.endswith("max_seq_len") for _, field, _ in fields if "seq_len" in field.name)


def test_old_names_still_work_for_one_release_with_a_note(capsys, tmp_path):
    from bertology.cli import parse

    def parsed(*argv):
        _, cfg = parse(list(map(str, argv)))
        return cfg, capsys.readouterr().err

    cfg, err = parsed("pretrain", "--corpus", tmp_path, "--out", tmp_path / "o", "--seq-len", "32")
    assert cfg.max_seq_len == 32
    assert err == "bertology: note: --seq-len is now --max-seq-len; the old name works until the next release\n"
    cfg, err = parsed("tokenizer", "train", tmp_path, "--out", tmp_path / "t")
    assert cfg.corpus == [str(tmp_path)] and "CORPUS as a positional argument is now --corpus" in err
    cfg, err = parsed("static", "train", "--corpus", tmp_path, "--out", tmp_path / "s", "--no-lowercase", "--workers", "1")
    assert cfg.cased is True and cfg.threads == 1 and "--no-lowercase is now --cased" in err and "--workers" in err
    cfg, err = parsed("embed", "--model", tmp_path, "--input", tmp_path / "in.txt", "--out", tmp_path / "v.npy",
                      "--field", "body")
    assert cfg.text_field == "body" and "--field is now --text-field" in err
    config = tmp_path / "static.toml"
    config.write_text(f'corpus = ["{tmp_path}"]\nout = "{tmp_path / "s2"}"\nlowercase = false\nworkers = 1\n')
    cfg, err = parsed("static", "train", "--config", config)
    assert cfg.cased is True and cfg.threads == 1
    assert f"{config}: note: setting 'lowercase' is now 'cased'; the old name works until the next release" in err


def test_seeds_table_shows_metrics_not_the_median_seed(capsys):
    from bertology.cli import print_results
    from bertology.recipes.task_training import summarize
    from bertology.tasks.readers import TASKS

    print_results(summarize(TASKS["sst2"], [{"seed": 42, "accuracy": 0.5, "step": 3},
                                            {"seed": 43, "accuracy": 0.7, "step": 6},
                                            {"seed": 44, "accuracy": 0.6, "step": 6}]))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "sst2 dev, median of 3 seeds (min / max):"
    assert [line.split()[0] for line in lines[1:]] == ["accuracy"] and "0.6000  (0.5000 / 0.7000)" in lines[1]


def test_tokenizer_train_can_skip_bad_lines(capsys, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"the cat sat on the mat.\n" * 40 + b"broken \xff line\n" + b"the dog sat on the log.\n" * 40)
    status, out, err = run_cli(capsys, "tokenizer", "train", "--corpus", corpus, "--vocab-size", "200", "--out", tmp_path / "tok",
                               "--skip-bad-lines")
    assert status == 0, err
    assert "an uncased wordpiece vocabulary" in out and "skipped 1 bad line(s)" in out
    vocab = (tmp_path / "tok" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert "cat" in vocab and "broken" not in vocab


@pytest.mark.slow
def test_a_closed_pipe_ends_the_command_quietly(tiny_model):
    """`bertology info DIR | head`: the reader stops early; no traceback."""
    process = subprocess.Popen([sys.executable, "-m", "bertology", "info", str(tiny_model)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line is written
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) != 0
    assert err == "", err


# ----- no empty output folder after a failure -------------------------------------------------------

@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """120 short documents of made-up sentences and a small vocabulary trained on them."""
    import random

    from bertology.data.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    words = "the a cat dog bird sat ran flew on under over mat log tree big small red blue quickly slowly".split()
    docs = ["\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))).capitalize() + "."
                      for _ in range(6)) for _ in range(120)]
    (root / "text.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    train_tokenizer([root / "text.txt"], vocab_size=300, out_dir=root / "tokenizer")
    return root


@pytest.mark.slow
def test_failed_pretrain_finetune_and_distill_leave_no_empty_output_folder(capsys, tmp_path, small_corpus,
                                                                          tiny_model, minilm_dir):
    from helpers import save_task_model

    (tmp_path / "empty.csv").write_text("text,label\n")
    teacher = save_task_model(tmp_path / "teacher", minilm_dir, task="sst2")
    runs = {
        "pretrain": ["--corpus", small_corpus / "text.txt", "--tokenizer", small_corpus / "tokenizer",
                     "--cache-dir", tmp_path / "cache", "--max-seq-len", "1024", "--max-steps", "1"],
        "finetune": ["--task", "classification", "--train-file", tmp_path / "empty.csv", "--model", tiny_model],
        "distill": ["--teacher", teacher, "--unlabeled", tmp_path / "missing.txt", "--no-train-text"],
    }
    for command, flags in runs.items():
        status, _, err = run_cli(capsys, command, *flags, "--out", tmp_path / "new" / command, "--no-progress")
        assert status == 2 and len(err.strip().splitlines()) == 1, (command, err)
        assert not (tmp_path / "new").exists(), command
    (tmp_path / "mine").mkdir()  # a folder that was there before is the user's: kept
    run_cli(capsys, "finetune", *runs["finetune"], "--out", tmp_path / "mine", "--no-progress")
    assert (tmp_path / "mine").is_dir()


def test_failed_embed_and_export_leave_no_empty_output_folder(capsys, tmp_path, tiny_model, monkeypatch):
    import bertology.uses.embed

    def fails(*args, **kwargs):
        raise bertology.UserError("the model failed")

    (tmp_path / "in.txt").write_text("a line\n")
    monkeypatch.setattr(bertology.uses.embed, "embed_texts", fails)  # fails while the output is being written
    status, _, err = run_cli(capsys, "embed", "--model", tiny_model, "--input", tmp_path / "in.txt",
                             "--out", tmp_path / "new" / "vectors.npy", "--no-progress")
    assert status == 2 and "the model failed" in err and not (tmp_path / "new").exists()

    broken = tmp_path / "broken"
    shutil.copytree(tiny_model, broken)
    (broken / "tokenizer_config.json").write_text("not json")  # read while the export is being written
    status, _, err = run_cli(capsys, "export", "--model", broken, "--format", "hf", "--out", tmp_path / "new" / "hf")
    assert status == 2 and "tokenizer_config.json" in err and not (tmp_path / "new").exists()


# ----- closing summaries --------------------------------------------------------------------------

def metric_rows(out):
    import json

    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def estimate_at_once(monkeypatch):
    """The training loop gives its up-front estimate after its first timed step (tiny runs are short)."""
    import bertology.training.loop

    monkeypatch.setattr(bertology.training.loop, "ESTIMATE_AFTER_SECONDS", 0.0)


@pytest.mark.slow
def test_pretrain_ends_with_a_summary(capsys, tmp_path, small_corpus, estimate_at_once):
    out = tmp_path / "run"
    status, stdout, err = run_cli(capsys, "pretrain", "--corpus", small_corpus / "text.txt", "--tokenizer",
                                  small_corpus / "tokenizer", "--cache-dir", tmp_path / "cache", "--out", out,
                                  "--preset", "tiny", "--max-seq-len", "32", "--batch-size", "8", "--max-steps", "4",
                                  "--log-every", "2", "--eval-fraction", "0.2", "--eval-batches", "2",
                                  "--precision", "fp32", "--no-progress")
    assert status == 0, err
    assert re.search(r"training at [\d.]+ steps/s.*: 4 steps take about \d+ s", err), err  # up front
    lines = stdout.splitlines()
    vocab = len((small_corpus / "tokenizer" / "vocab.txt").read_text(encoding="utf-8").splitlines())
    assert lines[0].startswith(f"pre-trained a tiny encoder (2 layers, 128 wide, {vocab}-token vocabulary) with the "
                               "bert objective: 4 steps in ")
    rates = [row["tokens_per_second"] for row in metric_rows(out) if "split" not in row]
    rate = float(lines[0].split("(")[-1].split(" tokens/s")[0].replace(",", ""))
    assert min(rates) - 1 <= rate <= max(rates) + 1
    held_out = [row for row in metric_rows(out) if row.get("split") == "eval"][-1]
    assert lines[1] == "held-out: " + ", ".join(f"{k} {v:.4f}" for k, v in held_out.items()
                                               if k not in ("step", "split", "elapsed"))
    assert "nsp_accuracy" in lines[1] and lines[2].endswith(f"to {out}")


@pytest.mark.slow
def test_finetune_and_distill_end_with_a_summary(capsys, tmp_path, tiny_model, keyword_task, keyword_model,
                                                estimate_at_once):
    status, stdout, err = run_cli(capsys, "finetune", "--task", "classification", "--train-file",
                                  keyword_task / "train.csv", "--dev-file", keyword_task / "dev.csv", "--model",
                                  tiny_model, "--out", tmp_path / "ft", "--epochs", "1", "--batch-size", "16",
                                  "--precision", "fp32", "--no-progress")
    assert status == 0, err
    assert re.search(r"training at [\d.]+ steps/s.*: 15 steps take about \d+ s", err), err
    lines = stdout.splitlines()
    assert lines[0] == "classification dev:" and lines[1].split()[0] == "accuracy"
    assert f"fine-tuned {tiny_model} for classification, 240 training examples x 1 epoch: 15 steps in " in stdout
    assert "examples/s" in stdout and stdout.rstrip().endswith(f"to {tmp_path / 'ft'}")

    status, stdout, err = run_cli(capsys, "distill", "--teacher", keyword_model, "--train-file",
                                  keyword_task / "train.csv", "--dev-file", keyword_task / "dev.csv", "--preset",
                                  "tiny", "--out", tmp_path / "student", "--epochs", "1", "--precision", "fp32",
                                  "--cache-dir", tmp_path / "cache", "--no-progress")
    assert status == 0, err
    assert re.search(r"training at [\d.]+ steps/s.*: 8 steps take about \d+ s", err), err
    assert "teacher_accuracy" in stdout and f"distilled {keyword_model} (" in stdout
    assert "into a random-weight tiny encoder (" in stdout and "240 transfer examples x 1 epoch: 8 steps in " in stdout
    assert stdout.rstrip().endswith(f"to {tmp_path / 'student'}")


@pytest.mark.slow
def test_an_installed_model_is_found_by_name(minilm_dir, tmp_path, capsys):
    status, out, err = run_cli(capsys, "info", "all-MiniLM-L6-v2")
    assert status == 0, err
    assert out.splitlines()[0] == f"model:        {minilm_dir.resolve()}"  # where it is installed
    lines = tmp_path / "lines.txt"
    lines.write_text("a first sentence\nand a second one\n")
    vectors = {}
    for model in ("sentence-transformers/all-MiniLM-L6-v2", minilm_dir):
        status, _, err = run_cli(capsys, "embed", "--model", model, "--input", lines, "--out", tmp_path / "v.npy",
                                 "--no-progress")
        assert status == 0, err
        vectors[str(model)] = (tmp_path / "v.npy").read_bytes()
        (tmp_path / "v.npy").unlink()
    assert len(set(vectors.values())) == 1  # the name and the path are the same model
    status, _, err = run_cli(capsys, "finetune", "--model", "no-such-model", "--task", "sst2", "--data", tmp_path,
                             "--out", tmp_path / "out")
    assert status == 2 and err == ("bertology: error: no-such-model: no such model directory, and no installed "
                                   "package ships a model of that name\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command, message", [
    (["generate", "--model", "MODEL", "--prompt", "hi", "--out", "DIR"], "--out DIR: is a folder; give a file name"),
    (["reproduce", "model-size", "--quick", "--out", "FILE"], "--out FILE: is a file, not a folder"),
    (["static", "train", "--corpus", "FILE", "--out", "FILE/sub"], "cannot be made, FILE is a file, not a folder"),
    (["pretrain", "--corpus", "FILE", "--out", "DIR/run", "--max-steps", "1", "--cache-dir", "FILE/cache"],
     "--cache-dir FILE/cache: cannot be made, FILE is a file"),
])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(capsys, tmp_path, command, message):
    (tmp_path / "FILE").write_text("the user's file\n")
    (tmp_path / "DIR").mkdir()
    args = [str(tmp_path / a) if a.split("/")[0] in ("FILE", "DIR") else a for a in command]
    args = [str(tmp_path / "MODEL") if a == "MODEL" else a for a in args]
    (tmp_path / "MODEL").mkdir()
    status, out, err = run_cli(capsys, *args)
    assert status == 2 and not out and len(err.strip().splitlines()) == 1
    assert message.replace("FILE", str(tmp_path / "FILE")).replace("DIR", str(tmp_path / "DIR")) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DIR", "FILE", "MODEL"]
    assert (tmp_path / "FILE").read_text() == "the user's file\n" and not any((tmp_path / "DIR").iterdir())


def test_a_full_disk_anywhere_is_one_line(capsys, tmp_path, monkeypatch):
    import errno

    import bertology.recipes.static_vectors

    def full(cfg):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "train.tmp"))

    monkeypatch.setattr(bertology.recipes.static_vectors, "train", full)
    (tmp_path / "corpus.txt").write_text("a b c\n")
    status, out, err = run_cli(capsys, "static", "train", "--corpus", tmp_path / "corpus.txt", "--out",
                               tmp_path / "out")
    assert status == 2 and err.strip() == f"bertology: error: {tmp_path / 'out' / 'train.tmp'}: No space left on device"


# ----- a training run never writes over what a user owns ------------------------------------------

@pytest.mark.parametrize("command", ["pretrain", "finetune", "translate train"])
def test_a_training_run_refuses_a_folder_of_the_users_files(capsys, tmp_path, small_corpus, command):
    out = tmp_path / "mine"
    out.mkdir()
    owned = {"model.safetensors": b"an export copy", "vocab.txt": b"my\nvocabulary\n", "config.json": b"{}"}
    for name, data in owned.items():
        (out / name).write_bytes(data)
    flags = {"pretrain": ["--corpus", small_corpus / "text.txt", "--max-steps", "1", "--vocab-size", "200"],
             "finetune": ["--task", "sst2", "--model", tmp_path],
             "translate train": ["--data", tmp_path, "--vectors", tmp_path]}[command]
    status, _, err = run_cli(capsys, *command.split(), *flags, "--out", out, "--no-progress")
    assert status == 2 and f"{out} is not empty (config.json, model.safetensors, vocab.txt)" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == owned


@pytest.mark.slow
def test_pretrain_records_its_settings_only_once_it_runs_and_a_resume_keeps_them(capsys, tmp_path, small_corpus):
    out = tmp_path / "run"
    base = ["pretrain", "--corpus", small_corpus / "text.txt", "--tokenizer", small_corpus / "tokenizer",
            "--cache-dir", tmp_path / "cache", "--arch", "gpt", "--preset", "tiny", "--max-seq-len", "32",
            "--batch-size", "4", "--max-steps", "2", "--eval-batches", "1", "--out", out, "--no-progress"]
    # A run that fails before it starts leaves nothing: not even its record.
    status, _, err = run_cli(capsys, *base[:-3], "--max-seq-len", "4096", "--out", tmp_path / "failed")
    assert status == 2 and "--max-seq-len 4096 is larger than the model's context" in err
    assert not (tmp_path / "failed").exists()
    assert run_cli(capsys, *base)[0] == 0
    record = (out / "pretrain_config.json").read_bytes()
    assert json.loads(record)["max_seq_len"] == 32
    status, _, err = run_cli(capsys, *base, "--seed", "1")  # a second run into the same folder
    assert status == 2 and "already holds a training run" in err
    status, _, err = run_cli(capsys, *base, "--resume", "--max-seq-len", "64", "--preset", "mini")
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert '(--preset "tiny" -> "mini"; --max-seq-len 32 -> 64)' in err, err
    assert (out / "pretrain_config.json").read_bytes() == record
    assert run_cli(capsys, *base, "--resume", "--max-steps", "3")[0] == 0  # a longer budget is no other run


def test_info_check_flags_a_run_that_diverged(capsys, tmp_path):
    from helpers import save_tiny_gpt

    model = save_tiny_gpt(tmp_path)
    (model / "metrics.jsonl").write_text('{"step": 2, "loss": 5.1}\n{"step": 2, "split": "eval", "loss": NaN}\n')
    status, out, err = run_cli(capsys, "info", "--check", model)
    assert status == 2 and out.strip() == f"{model / 'metrics.jsonl'}: the last evaluation (step 2) has loss nan: " \
                                          "the run diverged", out


def test_pretrain_refuses_a_batch_the_machine_cannot_hold_before_building_it(capsys, tmp_path, small_corpus):
    status, _, err = run_cli(capsys, "pretrain", "--corpus", small_corpus / "text.txt", "--tokenizer",
                             small_corpus / "tokenizer", "--cache-dir", tmp_path / "cache", "--batch-size", str(10**9),
                             "--max-steps", "1", "--out", tmp_path / "run")
    assert status == 2 and "--batch-size 1,000,000,000 x --max-seq-len 128 over 93 tokens, with a model of" in err, err
    assert "needs about" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
