"""The command line: help, version, info, tokenizer training, and one-line user errors."""

import shutil
import subprocess
import sys

import pytest

import bertology
from bertology.cli import main


def run_cli(capsys, *argv):
    """Run `bertology ARGV...` in-process; return (exit status, stdout, stderr)."""
    try:
        status = main(list(argv))
    except SystemExit as exit_:  # argparse's own exits (--help, --version, usage errors)
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err


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
    assert "30522 tokens in vocab.txt" in out and "hidden_size: 384" in out


def test_info_on_a_missing_directory_is_one_line(capsys, tmp_path):
    status, out, err = run_cli(capsys, "info", str(tmp_path / "nope"))
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("bertology: error:") and "nope" in err


def test_tokenizer_train_writes_a_loadable_vocabulary(capsys, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat.\nthe dog sat on the log.\n" * 50 + "고양이가 매트 위에 앉았다.\n" * 20,
                      encoding="utf-8")
    status, out, err = run_cli(capsys, "tokenizer", "train", str(corpus), "--vocab-size", "200",
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
    args = ["tokenizer", "train", str(corpus), "--out", str(tmp_path / "tok")]
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
