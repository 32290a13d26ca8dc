"""Settings: one definition per setting, composed into every command's config, read from flags,
config files and Python with the same checks, and turned into flags with their help and defaults."""

import argparse
import dataclasses
import importlib.util
import sys
import types

import pytest

from bertology import UserError
from bertology.cli import COMMANDS, build_parser, parse
from bertology.config import check_settings, choices_of, read_settings, setting_fields, setting_types
from bertology.models import family_named
from bertology.recipes.distill import DistillConfig
from bertology.recipes.finetune import FinetuneConfig
from bertology.recipes.pretrain import PretrainConfig
from bertology.recipes.task_training import EpochLoop, epoch_train_config
from bertology.training.loop import LoopConfig, TrainConfig
from bertology.uses.embed import EmbedConfig
from bertology.uses.serve import ServeConfig


def test_the_loop_settings_are_one_definition_composed_into_every_training_config():
    loop = {f.name for f in dataclasses.fields(LoopConfig)}
    for config in (TrainConfig, PretrainConfig, EpochLoop, FinetuneConfig, DistillConfig):
        fields = {f.name: f for f in dataclasses.fields(config)}
        assert loop <= set(fields), config
        for name in loop:  # the same help and checks: a recipe changes only a default
            assert fields[name].metadata == setting_fields(LoopConfig)[name].metadata, (config, name)


def test_each_component_owns_its_defaults():
    assert TrainConfig().lr == 1e-4 and PretrainConfig().lr == 5e-4
    assert FinetuneConfig().lr == 5e-5 and DistillConfig().lr == 1e-4
    assert FinetuneConfig().warmup == 0.1 and PretrainConfig().warmup == 0.06
    assert PretrainConfig().eval_every == 200 and TrainConfig().eval_every == 0
    assert EmbedConfig("m", "i", "o.npy").precision == "fp32" and ServeConfig().precision == "fp32"
    assert PretrainConfig().arch == "bert" and PretrainConfig().text_field == "text"


def test_an_epoch_recipe_passes_every_loop_setting_to_the_trainer():
    cfg = FinetuneConfig(lr=3e-5, weight_decay=0.02, adam_betas=(0.9, 0.98), adam_eps=1e-8, warmup=0.2,
                         schedule="slanted_triangular", max_grad_norm=0.5, compile=True, progress=False,
                         resume=True, tensorboard=True, epochs=2)
    train = epoch_train_config(cfg, steps_per_epoch=10, seed=7, precision="fp32")
    expected = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(LoopConfig)}
    assert {name: getattr(train, name) for name in expected} == {**expected, "seed": 7, "precision": "fp32"}
    assert (train.max_steps, train.eval_every, train.save_every) == (20, 10, 10)


def test_python_configs_get_the_same_checks_naming_the_flag(tmp_path):
    with pytest.raises(UserError, match="^--epochs must be positive, got -1$"):
        check_settings(FinetuneConfig(task="sst2", model=".", out="o", epochs=-1))
    with pytest.raises(UserError, match="^--precision must be one of auto, fp32, bf16, got 'fp16'$"):
        check_settings(EmbedConfig("m", "i", "o.npy", precision="fp16"))
    with pytest.raises(UserError, match="^--out is required$"):
        check_settings(DistillConfig(teacher="t"))
    with pytest.raises(UserError, match="^--max-seq-len must be at least 8, got 4$"):
        PretrainConfig(corpus=[str(tmp_path)], out="o", max_steps=1, max_seq_len=4).validate()


def test_config_files_are_checked_by_type_choice_and_bound(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('schedule = "cosine"\n')
    with pytest.raises(UserError, match="run.toml: setting 'schedule' must be one of linear, slanted_triangular"):
        read_settings(PretrainConfig, config)
    config.write_text("batch_size = 0\n")
    with pytest.raises(UserError, match="run.toml: setting 'batch_size' must be positive, got 0"):
        read_settings(FinetuneConfig, config)
    config.write_text("adam_betas = [0.9, 0.98]\nlabels = [\"a\", \"b\"]\n")
    assert read_settings(FinetuneConfig, config)["adam_betas"] == [0.9, 0.98]
    for budget in ("90", '"20m"'):  # seconds, or a duration
        config.write_text(f"max_time = {budget}\n")
        assert read_settings(PretrainConfig, config)["max_time"] in (90, "20m")
    config.write_text("adam_betas = [0.9]\n")
    with pytest.raises(UserError, match="'adam_betas' must be tuple"):
        read_settings(FinetuneConfig, config)
    (tmp_path / "run.json").write_text("[1, 2]")
    with pytest.raises(UserError, match="run.json: expected an object"):
        read_settings(FinetuneConfig, tmp_path / "run.json")


def test_invalid_toml_names_the_line_and_other_failures_are_not_called_toml(tmp_path, monkeypatch):
    config = tmp_path / "run.toml"
    config.write_text("lr = 1\nseq_len = = 3\n")
    with pytest.raises(UserError, match=r"run.toml: invalid TOML: .*line 2"):
        read_settings(PretrainConfig, config)
    import bertology.config

    def broken(text):
        raise RuntimeError("not a TOML problem")

    monkeypatch.setattr(bertology.config.tomllib, "loads", broken)
    with pytest.raises(RuntimeError, match="not a TOML problem"):
        read_settings(PretrainConfig, config)


def test_python_3_10_reads_toml_with_tomli(monkeypatch):
    """config.py as Python 3.10 runs it: `tomli` (the same parser, before it joined the standard library)."""
    tomli = types.ModuleType("tomli")
    tomli.loads, tomli.TOMLDecodeError = (lambda text: {"from": "tomli"}), ValueError
    monkeypatch.setitem(sys.modules, "tomli", tomli)
    monkeypatch.setattr(sys, "version_info", (3, 10, 12, "final", 0))
    spec = importlib.util.spec_from_file_location("bertology._config_on_3_10",
                                                  importlib.util.find_spec("bertology.config").origin)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # where its dataclasses look themselves up
    spec.loader.exec_module(module)
    assert module.tomllib is tomli


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of one command (`name` may be "tokenizer train"), with its flags."""
    parser = build_parser(name.split())
    for word in name.split():
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    return parser


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command.name)
def test_every_flag_comes_from_a_setting_with_help_and_its_default(command):
    """Flags are the settings dataclass's fields (dict fields are config-file only), named after them,
    each with help saying its default or that it is required, choices listed."""
    cls = command.settings_class()
    parser = command_parser(command.name)
    shown = [a for a in parser._actions if a.dest not in ("help", "config") and a.help != argparse.SUPPRESS]
    fields = {name: field for name, field in setting_fields(cls).items()
              if getattr(setting_types(cls)[name], "__origin__", None) is not dict}
    assert {a.dest for a in shown} == set(fields)
    hidden = [a for a in parser._actions if a.help == argparse.SUPPRESS]  # a renamed setting's old names
    assert sorted(flag for a in hidden for flag in a.option_strings) == sorted(
        "--" + old.replace("_", "-") for field in fields.values() for old in field.metadata["formerly"])
    for argument in shown:
        field = fields[argument.dest]
        name = argument.dest.replace("_", "-")
        assert argument.option_strings in ([f"--{name}"], [f"--no-{name}"], []), argument.option_strings
        # a setting that was positional is checked as required after parsing (`cli.parse`)
        assert argument.required == (field.metadata["required"] and not field.metadata["was_positional"]) or \
            field.metadata["positional"], argument.dest
        assert ("(required)" in argument.help) == field.metadata["required"], argument.dest
        assert "default" in argument.help or field.metadata["required"], (command.name, argument.dest, argument.help)
        if choices_of(field):
            assert argument.metavar == "{" + ",".join(map(str, choices_of(field))) + "}"


def test_flags_win_over_the_config_file_which_wins_over_the_defaults(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(f'corpus = ["{tmp_path}"]\nout = "from-file"\nmax_seq_len = 32\nmax_steps = 50\n'
                      "progress = false\n[model]\npre_layer_norm = true\n")
    _, cfg = parse(["pretrain", "--config", str(config), "--max-steps", "3", "--share-layers"])
    assert (cfg.corpus, cfg.out, cfg.max_seq_len, cfg.max_steps, cfg.progress) == ([str(tmp_path)], "from-file", 32, 3, False)
    assert cfg.model == {"pre_layer_norm": True} and cfg.lr == 5e-4  # untouched: the recipe's default
    assert cfg.model_overrides(family_named("bert").spec) == {"pre_layer_norm": True, "share_layers": True}
    _, cfg = parse(["pretrain", "--config", str(config), "--max-seq-len", "64", "--no-segment-embeddings",
                    "--no-progress"])  # the switch's flag is the same whatever the file says
    assert cfg.max_seq_len == 64 and cfg.progress is False
    assert cfg.model_overrides(family_named("bert").spec)["type_vocab_size"] == 0
    with pytest.raises(SystemExit):  # --corpus and --out are required when no file gives them
        parse(["pretrain", "--max-steps", "3"])


def test_training_commands_share_flag_names_for_the_same_setting():
    """Flag names are generated from field names, so one name per setting across commands."""
    by_flag = {}
    for command in COMMANDS:
        for argument in command_parser(command.name)._actions:
            for flag in argument.option_strings:
                by_flag.setdefault(flag, set()).add(command.name)
    assert {"finetune", "distill"} <= by_flag["--max-train-examples"]
    assert "--max-transfer-examples" not in by_flag
    assert {"pretrain", "finetune", "distill"} <= by_flag["--tensorboard"] & by_flag["--seed"] & by_flag["--resume"]


# Values that passed every bound before: `nan <= 0` is False, and Python's integers have no size.
BAD_NUMBERS = [
    ("pretrain", ["--lr", "nan"], "must be a finite number, got nan"),
    ("pretrain", ["--adam-eps", "inf"], "must be a finite number, got inf"),
    ("pretrain", ["--adam-betas", "2", "5"], "must be below 1, got 2.0"),
    ("pretrain", ["--eval-fraction", "nan"], "must be a finite number, got nan"),
    ("pretrain", ["--short-seq-prob", "5"], "must be at most 1, got 5.0"),
    ("pretrain", ["--seed", "-1"], "must be a seed from 0 to 4,294,967,295"),
    ("pretrain", ["--seed", str(2**64)], "must fit in 64 bits"),
    ("pretrain", ["--max-steps", str(10**30)], "must fit in 64 bits"),
    ("finetune", ["--epochs", "nan"], "must be a finite number, got nan"),
    ("static train", ["--lr", "inf"], "must be a finite number, got inf"),
    ("static train", ["--x-max", "nan"], "must be a finite number, got nan"),
    ("static train", ["--alpha", "nan"], "must be a finite number, got nan"),
    ("static train", ["--sample", "nan"], "must be a finite number, got nan"),
    ("serve", ["--max-wait-ms", "inf"], "must be a finite number, got inf"),
    ("serve", ["--max-wait-ms", "nan"], "must be a finite number, got nan"),
    ("generate", ["--temperature", "nan"], "must be a finite number, got nan"),
    ("generate", ["--seed", str(2**40)], "must be a seed from 0"),
]


@pytest.mark.parametrize("command, flags, message", BAD_NUMBERS, ids=[" ".join(c[1]) for c in BAD_NUMBERS])
def test_non_finite_and_out_of_range_numbers_are_refused_naming_the_flag(capsys, command, flags, message):
    with pytest.raises(SystemExit) as stop:
        parse([*command.split(), *flags])
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip()
    assert f"argument {flags[0]}: {message}" in error and len(error.splitlines()) == 1, error


def test_config_files_and_python_configs_get_the_same_finite_and_range_checks(tmp_path):
    config = tmp_path / "run.toml"
    for text, message in (("lr = nan", "setting 'lr' must be a finite number, got nan"),
                          ("warmup = inf", "setting 'warmup' must be a finite number, got inf"),
                          ("adam_betas = [0.9, nan]", "setting 'adam_betas' must be a finite number, got nan"),
                          ("seed = -5", "setting 'seed' must be a seed from 0"),
                          (f"seed = {2**63 - 1}", "setting 'seed' must be a seed from 0")):
        config.write_text(text + "\n")
        with pytest.raises(UserError, match=f"run.toml: {message}"):
            read_settings(PretrainConfig, config)
    (tmp_path / "run.json").write_text('{"lr": NaN}')  # Python's JSON reads NaN and Infinity
    with pytest.raises(UserError, match="setting 'lr' must be a finite number, got nan"):
        read_settings(FinetuneConfig, tmp_path / "run.json")
    with pytest.raises(UserError, match="^--lr must be a finite number, got nan$"):
        check_settings(FinetuneConfig(task="sst2", model=".", out="o", lr=float("nan")))


@pytest.mark.parametrize("budget", ["nan", "infs", "-inf", "nanm"])
def test_a_non_finite_time_budget_is_refused(tmp_path, budget):
    with pytest.raises(UserError, match="a duration must be a finite number of seconds"):
        TrainConfig(max_time=budget).validate()
    with pytest.raises(UserError, match="a duration must be a finite number of seconds"):
        PretrainConfig(corpus=[str(tmp_path)], out="o", max_time=budget).validate()


def test_word2vec_min_lr_above_its_lr_is_refused(tmp_path):
    from bertology.recipes.static_vectors import StaticTrainConfig

    with pytest.raises(UserError, match=r"--min-lr \(0.1\) must be at most --lr \(0.025\)"):
        StaticTrainConfig(corpus=[str(tmp_path)], out="o", min_lr=0.1).validate()
    StaticTrainConfig(corpus=[str(tmp_path)], out="o", method="glove", min_lr=0.1).validate()  # GloVe has no min_lr
