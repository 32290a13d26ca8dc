"""The documented commands work as written: every `bertology` command in the bash blocks of the
README and of every page under docs/ parses with today's flags, and the cheap ones that need
neither minutes of training, the development data nor an earlier run's output run from an empty
folder and exit 0."""

import os
import re
import shlex
from pathlib import Path

import pytest
from helpers import run_cli

from bertology.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCUMENTS = [README, *sorted((REPO / "docs").rglob("*.md"))]
# Commands that train for minutes (or serve until stopped): parsed here, run by their own tests
# (tests/recipes/, tests/claims/). `reproduce --list` alone of the claims' commands is cheap.
EXPENSIVE = {"demo", "pretrain", "finetune", "distill", "serve", "static train", "translate train", "reproduce"}
CHEAP_ALWAYS = [["reproduce", "--list"]]
# What a README command may read without the development data: the files this test writes first.
PREPARED = {"sentences.txt": "The bank raised its rates.\nWe sat on the river bank.\n"}


def documented_commands(document: Path) -> list[list[str]]:
    """The `bertology ...` commands (and `... -m bertology ...`, as under torchrun) of a Markdown
    file's bash blocks, as argv lists (continuation lines joined, comments dropped, $BERTOLOGY_DATA
    left as it is written)."""
    blocks = re.findall(r"```bash\n(.*?)```", document.read_text(encoding="utf-8"), flags=re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["bertology"]:
                commands.append(words[1:])
            elif "-m" in words[:-1] and words[words.index("-m") + 1] == "bertology":
                commands.append(words[words.index("-m") + 2:])
    return commands


# Each distinct command once (pages repeat some), in the order the README and the pages give them.
COMMANDS = list({tuple(argv): argv for document in DOCUMENTS for argv in documented_commands(document)}.values())


def test_the_readme_and_every_command_page_have_commands_to_check():
    assert {argv[0] for argv in documented_commands(README)} >= {"demo", "pretrain", "finetune", "embed", "info"}
    names = {argv[0] for argv in COMMANDS}
    assert names >= {"demo", "tokenizer", "pretrain", "finetune", "evaluate", "predict", "embed", "explain", "wic",
                     "generate", "distill", "export", "serve", "reproduce", "static", "translate", "info"}
    for page in sorted((REPO / "docs" / "commands").glob("*.md")):
        if page.name != "index.md":
            assert documented_commands(page), f"{page.name} shows no bertology command"


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(argv)[:60] for argv in COMMANDS])
def test_every_readme_command_parses_with_todays_flags(argv, capsys):
    try:
        build_parser(argv).parse_args(argv)
    except SystemExit as exit_:
        pytest.fail(f"bertology {' '.join(argv)}: {capsys.readouterr().err.strip()} (exit {exit_.code})")


def needs_more_than_the_package(argv: list[str]) -> bool:
    """Whether a command needs minutes of training, the development data or an earlier run's output
    (what it writes, the value of --out, may be anywhere)."""
    if argv in CHEAP_ALWAYS:
        return False
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


def test_some_documented_commands_are_cheap_enough_to_run():
    assert {argv[0] for argv in CHEAP} >= {"embed", "explain", "info", "reproduce"}


@pytest.mark.slow  # a pytest run in a subprocess: seconds
def test_the_suite_says_at_its_end_how_many_tests_skipped_for_missing_data(tmp_path):
    import subprocess
    import sys

    repo = REPO
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                             "tests/claims/test_experiment.py", "-k", "corpus_slice or registry_lists"],
                            cwd=repo, capture_output=True, text=True, env={**os.environ, "BERTOLOGY_DATA": str(tmp_path)})
    assert result.returncode == 0, result.stdout[-2000:]
    assert "1 passed, 1 skipped" in result.stdout
    assert f"1 test(s) skipped: their data sets are not in {tmp_path} ($BERTOLOGY_DATA" in result.stdout
    assert "../shared/data/SOURCES.md" in result.stdout
