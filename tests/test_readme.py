"""The README's commands work as written: every `bertology` command in its bash blocks parses with
today's flags, and the cheap ones that need neither the development data nor an earlier run's
output run from an empty folder and exit 0."""

import os
import re
import shlex
from pathlib import Path

import pytest
from helpers import run_cli

from bertology.cli import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"
# Commands that train for minutes: parsed here, run by their own tests (tests/recipes/).
EXPENSIVE = {"demo", "pretrain", "finetune", "distill", "serve", "static train", "reproduce label-needs"}
# What a README command may read without the development data: the files this test writes first.
PREPARED = {"sentences.txt": "The bank raised its rates.\nWe sat on the river bank.\n"}


def readme_commands() -> list[list[str]]:
    """The `bertology ...` commands of the README's bash blocks, as argv lists (continuation lines
    joined, comments dropped, $BERTOLOGY_DATA left as it is written)."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["bertology"]:
                commands.append(words[1:])
    return commands


COMMANDS = readme_commands()


def test_the_readme_has_commands_to_check():
    names = {argv[0] for argv in COMMANDS}
    assert {"demo", "pretrain", "finetune", "embed", "export", "serve", "static"} <= names


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(argv)[:60] for argv in COMMANDS])
def test_every_readme_command_parses_with_todays_flags(argv, capsys):
    try:
        build_parser(argv).parse_args(argv)
    except SystemExit as exit_:
        pytest.fail(f"bertology {' '.join(argv)}: {capsys.readouterr().err.strip()} (exit {exit_.code})")


def needs_more_than_the_package(argv: list[str]) -> bool:
    """Whether a command needs minutes of training, the development data or an earlier run's output
    (what it writes, the value of --out, may be anywhere)."""
    inputs = [word for previous, word in zip(["", *argv], argv) if previous != "--out"]
    return bool({argv[0], " ".join(argv[:2])} & EXPENSIVE) or any("$BERTOLOGY_DATA" in word or word.startswith("runs/") for word in inputs)


CHEAP = [argv for argv in COMMANDS if not needs_more_than_the_package(argv)]


@pytest.mark.slow
@pytest.mark.parametrize("argv", CHEAP, ids=[" ".join(argv)[:60] for argv in CHEAP])
def test_cheap_readme_commands_run_as_written(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, text in PREPARED.items():
        Path(name).write_text(text, encoding="utf-8")
    status, _, err = run_cli(capsys, *[os.path.expandvars(word) for word in argv])
    assert status == 0, f"bertology {' '.join(argv)}: {err}"


def test_some_readme_commands_are_cheap_enough_to_run():
    assert {argv[0] for argv in CHEAP} >= {"embed", "explain", "info"}


@pytest.mark.slow  # a pytest run in a subprocess: seconds
def test_the_suite_says_at_its_end_how_many_tests_skipped_for_missing_data(tmp_path):
    import subprocess
    import sys

    repo = README.parent
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                             "tests/claims/test_experiment.py", "-k", "corpus_slice or registry_lists"],
                            cwd=repo, capture_output=True, text=True, env={**os.environ, "BERTOLOGY_DATA": str(tmp_path)})
    assert result.returncode == 0, result.stdout[-2000:]
    assert "1 passed, 1 skipped" in result.stdout
    assert f"1 test(s) skipped: their data sets are not in {tmp_path} ($BERTOLOGY_DATA" in result.stdout
    assert "../shared/data/SOURCES.md" in result.stdout
