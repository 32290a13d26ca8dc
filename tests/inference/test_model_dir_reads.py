"""A model directory is opened once: evaluate, predict, embed and a server's start read its config.json once.

inference/modeldir.py's `open_model_dir` reads config.json into a `ModelDir` that knows the
family, the config, the task and the export format; everything after it (the runner, the model,
the feature encoder) takes what it read. Each read is counted here at the file: `Path.read_text`,
`Path.read_bytes` and `open` of a file named config.json.
"""

import builtins
from pathlib import Path

import pytest
from helpers import run_cli

from bertology.uses.serve import load_served


@pytest.fixture
def config_reads(monkeypatch) -> list[Path]:
    """Every read of a config.json from now on, by path."""
    reads: list[Path] = []
    read_text, read_bytes, real_open = Path.read_text, Path.read_bytes, builtins.open

    def counted(read):
        def reading(self, *args, **kwargs):
            if self.name == "config.json":
                reads.append(self)
            return read(self, *args, **kwargs)
        return reading

    def opening(file, *args, **kwargs):
        if isinstance(file, (str, Path)) and Path(file).name == "config.json":
            reads.append(Path(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted(read_text))
    monkeypatch.setattr(Path, "read_bytes", counted(read_bytes))
    monkeypatch.setattr(builtins, "open", opening)
    return reads


@pytest.mark.slow
def test_each_command_reads_the_model_directorys_config_once(keyword_model, keyword_task, tiny_model, capsys,
                                                              tmp_path, config_reads):
    commands = {
        "evaluate": ["evaluate", "--model", keyword_model, "--data", keyword_task / "dev.csv", "--task",
                     "classification", "--precision", "fp32"],
        "predict": ["predict", "--model", keyword_model, "--input", keyword_task / "unlabeled.txt", "--out",
                    tmp_path / "predictions.tsv"],
        "embed a fine-tuned model": ["embed", "--model", keyword_model, "--input", keyword_task / "unlabeled.txt",
                                     "--out", tmp_path / "a.npy"],
        "embed an encoder": ["embed", "--model", tiny_model, "--input", keyword_task / "unlabeled.txt",
                             "--out", tmp_path / "b.npy"],
    }
    for what, argv in commands.items():
        config_reads.clear()
        status, _, err = run_cli(capsys, *argv)
        assert status == 0, f"{what}: {err}"
        assert config_reads == [keyword_model / "config.json" if "encoder" not in what else
                                tiny_model / "config.json"], what
    config_reads.clear()
    served = load_served(str(keyword_model), "fp32")
    assert served.runner.spec.name == "classification"
    assert config_reads == [keyword_model / "config.json"], "serve"
