"""The `bertology` command line.

Every command's flags are generated from its settings dataclass (config.py's `setting`
fields): a field is a flag with its help text, its default, its choices and whether it is
required, so `--help` shows the defaults the code uses. The training commands also take
`--config FILE` (TOML or JSON, any of the fields; flags win over the file).

The dataclasses live beside the code they configure (PretrainConfig in recipes/pretrain.py,
the loop's fields in training/loop.py, ...), and most of those modules import PyTorch. So the
parser is built in two steps: every command is listed with its one-line help, and only the
command being run gets its flags, by importing its module. `bertology --help` and
`--version` import no PyTorch.

User mistakes (`UserError`) print one line and exit with status 2, never a traceback. A
command that fails before writing anything leaves no empty output folder behind, and a
reader that closes the pipe early (`bertology info DIR | head`) ends the command quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import itertools
import json
import os
import shutil
import signal
import sys
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any, Callable, Iterator, get_args, get_origin

from . import __version__
from .config import (
    Device,
    Threads,
    alternatives,
    bounds_problem,
    check_settings,
    choices_of,
    default_of,
    option_name,
    read_settings,
    renamed_note,
    resolve_threads,
    setting,
    setting_fields,
    setting_types,
)
from .errors import UserError
from .models import family_named, resolve_model_dir

# ----- settings dataclasses of the small commands (the others are beside their code) -------------


@dataclass
class TokenizerTrainConfig(Threads):
    """The corpus, the vocabulary and where it goes.

    The settings of `bertology tokenizer train`.
    """

    corpus: list[str] = setting(required=True, metavar="PATH", was_positional=True,
                                help="text files, or folders of them (also JSONL, Parquet, compressed)")
    out: str = setting(required=True, metavar="DIR", output="dir",
                       help="output directory: tokenizer.json, tokenizer_config.json and vocab.txt (bpe: vocab.json, "
                            "merges.txt)")
    vocab_size: int = setting(30522, positive=True, help="vocabulary size, the special tokens and sentinels included")
    model: str = setting("wordpiece", choices=("wordpiece", "unigram", "bpe"),
                         help="wordpiece (BERT's: longest match, split at punctuation), unigram (SentencePiece's, "
                              "T5's: most probable split, spaces kept as '▁') or bpe (GPT-2's byte-level BPE, cased, "
                              "<|endoftext|> its one special token)")
    sentinels: int = setting(0, minimum=0, help="add this many sentinel tokens <extra_id_0> ... for T5's span "
                                                "corruption (T5: 100)")
    cased: bool = setting(False, help="keep case (and, for wordpiece, accents: BERT cased)")
    min_frequency: int = setting(2, positive=True, help="drop pieces seen fewer times")
    skip_bad_lines: bool = setting(False, help="skip (and count) lines that are not UTF-8 instead of stopping")
    text_field: str = setting("text", help="JSONL corpus files: the field that holds the text")


@dataclass
class InfoConfig:
    """The model directory.

    The settings of `bertology info`.
    """

    model: str = setting(required=True, positional=True, metavar="MODEL", model_dir=True,
                         help="a model directory (bertology or transformers layout) or an installed model's name "
                              "(e.g. all-MiniLM-L6-v2)")
    check: bool = setting(False, help="check the directory instead of loading it: config fields, every tensor "
                                      "against the config (shape, dtype, finite), vocabulary and tokenizer, one line "
                                      "per problem")


@dataclass
class ExplainConfig(Device):
    """The model and the picture.

    What both `bertology explain` commands take.
    """

    model: str = setting(required=True, metavar="MODEL", model_dir=True,
                         help="any model directory (pre-trained, fine-tuned, transformers BERT) or an installed "
                              "model's name")
    out: str = setting(required=True, metavar="FILE.png", output="file", help="the picture")
    model_name: str | None = setting(None, help="the name in the title (default: the directory's name)")


@dataclass
class ExplainAttentionConfig(ExplainConfig):
    """The text, and the layers and heads to draw.

    The settings of `bertology explain attention`.
    """

    text: str = setting("", required=True, help="the text (text A)")
    text_pair: str | None = setting(None, help="a second text (text B), as in sentence-pair tasks (default: none)")
    layer: str = setting("last", help="a layer number (1..layers), -1 or last, or all")
    head: str = setting("all", help="a head number (1..heads), or all: a grid of the heads")


@dataclass
class ExplainSensesConfig(ExplainConfig):
    """The word and its sentences.

    The settings of `bertology explain senses`.
    """

    word: str = setting("", required=True, help="the ambiguous word (built-in sentences for: bank)")
    sentences: str | None = setting(None, metavar="FILE",
                                    help="your own sentences: one 'sense<TAB>sentence' per line, two senses with "
                                         "two sentences each at least (default: the built-in ones)")
    layer: str = setting("last", help="0 (the embeddings output) .. layers, -1 or last, or sum_last_four and the like")
    vectors: str | None = setting(None, metavar="DIR", formerly=("static",),
                                  help="static word vectors (`bertology static train`) for the static view (default: "
                                       "the model's own input embeddings)")


# ----- flags from settings ----------------------------------------------------------------------


def checked_type(kind: type, field: dataclasses.Field) -> Callable[[str], Any]:
    """argparse type: `kind` (int, float or str) read from the text, within the field's bounds."""
    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        problem = bounds_problem(field, value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    return convert


def shown(value: Any) -> str:
    """A default as `--help` shows it."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return " ".join(map(shown, value))
    return str(value)


def help_text(field: dataclasses.Field, default: Any, required: bool) -> str:
    """The field's help with its default (or "required"), escaped for argparse's % formatting."""
    text = field.metadata["help"]
    if required:
        text += " (required)"
    elif default is True:
        text += " (default: on; this flag turns it off)"
    elif default is False:
        text += " (default: off)"
    elif "default" not in text and default not in (None, dataclasses.MISSING):
        text += f" (default: {shown(default)})"
    return text.replace("%", "%%")


def add_settings(parser: argparse.ArgumentParser, cls: type, given: dict[str, Any]) -> None:
    """One argument per setting of dataclass `cls`, grouped by the class that declares it (titled by
    its docstring's first line), the command's own first. `given`: the config file's values,
    which become the defaults (so a setting the file has is no longer required)."""
    fields = setting_fields(cls)
    owners = {name: next(k for k in reversed(cls.__mro__) if name in vars(k).get("__annotations__", {}))
              for name in fields}
    for owner in cls.__mro__:
        if owner in owners.values():
            group = parser.add_argument_group(owner.__doc__.strip().splitlines()[0].rstrip("."))
            for name in (name for name in fields if owners[name] is owner):
                add_setting(group, name, fields[name], setting_types(cls)[name], given)


def add_setting(group: argparse._ArgumentGroup, name: str, field: dataclasses.Field, hint: Any,
                given: dict[str, Any]) -> None:
    """The argument of one setting: its flag (--no-NAME for a switch that is on by default) or
    positional, its type, bounds, choices, help and default."""
    meta = field.metadata
    default = default_of(field)  # what --help shows, and what decides a switch's flag
    required = meta["required"] and name not in given
    kinds = [kind for kind in alternatives(hint) if kind is not type(None)]
    kind = kinds[0] if len(kinds) == 1 else str  # a float-or-text setting (a duration) reads text
    if get_origin(kind) is dict:
        return  # config-file only
    value = given.get(name, default)
    options = {"help": help_text(field, default, required), "default": None if value is dataclasses.MISSING else value}
    if kind is bool:
        flag = option_name(f"no_{name}" if default else name)
        group.add_argument(flag, dest=name, action="store_false" if default else "store_true", **options)
        for old in meta["formerly"]:
            group.add_argument(option_name(old), dest=name, action=RenamedFlag, new_flag=flag, switch_to=not default,
                               help=argparse.SUPPRESS)
        return
    if get_origin(kind) in (list, tuple):
        options["nargs"] = "+" if get_origin(kind) is list else len(get_args(kind))
        kind = get_args(kind)[0]
    options["type"] = checked_type(kind, field)
    if choices := choices_of(field):  # listed here, checked by the settings' owner (one message for flag, file and Python)
        options["metavar"] = "{" + ",".join(map(str, choices)) + "}"
    elif meta["metavar"]:
        options["metavar"] = meta["metavar"]
    if meta["positional"]:
        group.add_argument(name, **options, **({} if required else {"nargs": "?"}))
    else:
        # a setting that was positional is still taken so (checked as required in `parse`)
        group.add_argument(option_name(name), dest=name, required=required and not meta["was_positional"], **options)
    if meta["was_positional"]:
        group.add_argument(f"{FORMERLY_POSITIONAL}{name}", nargs="*", type=options["type"], help=argparse.SUPPRESS)
    renamed = {"nargs": options.get("nargs"), "type": options["type"], "metavar": options.get("metavar")}
    for old in meta["formerly"]:
        group.add_argument(option_name(old), dest=name, action=RenamedFlag, new_flag=option_name(name),
                           help=argparse.SUPPRESS, **renamed)


# The dest of the positional argument a setting used to be (see `setting`'s `was_positional`).
FORMERLY_POSITIONAL = "formerly_positional_"


class RenamedFlag(argparse.Action):
    """An old name of a setting (`setting`'s `formerly`): it works as the new flag does, with a
    one-line note; for a switch, it sets what the new switch sets."""

    def __init__(self, option_strings, dest, new_flag, switch_to=None, **kwargs):
        self.new_flag, self.switch_to = new_flag, switch_to
        super().__init__(option_strings, dest, **{**kwargs, **({"nargs": 0} if switch_to is not None else {})})

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"bertology: {renamed_note(option_string, self.new_flag)}", file=sys.stderr)
        setattr(namespace, self.dest, self.switch_to if self.switch_to is not None else values)


def config_file_values(cls: type, argv: list[str]) -> dict[str, Any]:
    """The settings of the `--config FILE` in argv, if there is one (checked: see `read_settings`)."""
    finder = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    finder.add_argument("--config")
    found, _ = finder.parse_known_args(argv)
    return read_settings(cls, found.config) if found.config else {}


# ----- the commands -----------------------------------------------------------------------------


def run_tokenizer_train(cfg: TokenizerTrainConfig) -> None:
    """Train the vocabulary and report where it went."""
    from .data.corpus import ReadStats, reading_notes
    from .data.tokenizer import train_tokenizer

    stats = ReadStats()
    tokenizer = train_tokenizer(cfg.corpus, vocab_size=cfg.vocab_size, cased=cfg.cased, out_dir=cfg.out,
                                min_frequency=cfg.min_frequency, skip_bad_lines=cfg.skip_bad_lines,
                                text_field=cfg.text_field, stats=stats, model=cfg.model, sentinels=cfg.sentinels)
    notes = reading_notes(stats.skipped_lines, stats.control_characters)
    casing = "a cased" if cfg.cased or cfg.model == "bpe" else "an uncased"  # GPT-2's BPE keeps case
    print(f"wrote {casing} {cfg.model} vocabulary of {tokenizer.vocab_size} tokens "
          f"to {cfg.out}{'; ' + notes if notes else ''}")


def run_info(cfg: InfoConfig) -> None:
    """Load the model and its tokenizer (which validates every tensor and file) and print what it is:
    its family, tokenizer, the commands that take it and its config; with --check, list every
    problem of the directory instead (exit status 2 when there is one)."""
    from .inference.modeldir import check_model_dir, open_model_dir
    from .training.loop import run_problems

    if cfg.check:
        problems = check_model_dir(cfg.model) + run_problems(Path(cfg.model))
        for problem in problems:
            print(problem)
        if problems:
            raise UserError(f"{cfg.model}: {len(problems)} problem(s)")
        print(f"{Path(cfg.model).resolve()}: healthy (config, every tensor's shape, dtype and values, vocabulary, "
              "tokenizer)")
        return

    model_dir = open_model_dir(cfg.model)
    model = model_dir.load_model()
    tokenizer = model_dir.tokenizer() if model_dir.spec.tokenized else None
    config = model.config
    print(f"model:        {model_dir.path.resolve()}")
    print(f"family:       {model_dir.family.name}: {model_dir.describe()}")
    print(f"architecture: {type(model).__name__}")
    print(f"parameters:   {model.num_parameters():,}")
    if tokenizer is not None:
        print(f"tokenizer:    {tokenizer.kind} ({tokenizer.tokenizer_class}), {tokenizer.vocab_size:,} tokens, "
              f"{config.vocab_size:,} embedding rows")
    else:
        print("tokenizer:    none: the model reads words")
    print(f"commands:     {', '.join(model_dir.commands()) or 'none'}")
    print("config:")
    for key, value in config.to_dict().items():
        print(f"  {key}: {value}")


def print_results(results: dict) -> None:
    """A small table of a results dict's metrics (fractions shown as they are)."""
    skip = ("task", "split", "runs", "seeds", "seed", "step", "mode")
    rows = [(k, v) for k, v in results.items() if k not in skip and isinstance(v, (int, float))]
    if "seeds" in results:
        print(f"{results['task']} dev, median of {results['seeds']} seeds (min / max):")
        for key, value in rows:
            if not key.endswith(("_min", "_max", "_std")):
                print(f"  {key:<22} {value:.4f}  ({results[key + '_min']:.4f} / {results[key + '_max']:.4f})")
        return
    print(f"{results['task']} {results['split']}:")
    for key, value in rows:
        print(f"  {key:<22} {value:.4f}")


def training_summary(runs: list[Path], examples: int | None = None) -> tuple[str, dict]:
    """("N steps in S s (E examples/s, T tokens/s)", the last run's last evaluation) from the
    metrics.jsonl of each run folder; `examples`: how many the runs trained on, all epochs."""
    from .training.loop import MetricsLog, run_summary

    totals = [run_summary(MetricsLog(run / "metrics.jsonl").rows()) for run in runs]
    steps, seconds, tokens = (sum(total[key] for total in totals) for key in ("steps", "seconds", "tokens"))
    rate = f"{examples / seconds:,.0f} examples/s, " if examples and seconds else ""
    return f"{steps:,} steps in {seconds:.1f} s ({rate}{tokens / max(seconds, 1e-9):,.0f} tokens/s)", totals[-1]["eval"]


def epochs(count: float) -> str:
    """"1 epoch", "2.5 epochs"."""
    return f"{count:g} epoch{'' if count == 1 else 's'}"


def run_pretrain(cfg: Any) -> None:
    """Pre-train, then say what was trained, how fast, how well, and where it is."""
    from .recipes.pretrain import run_pretraining

    if run_pretraining(cfg) == "interrupted":
        raise KeyboardInterrupt  # the loop has said where its checkpoint is
    out = Path(cfg.out)
    spec = family_named(cfg.arch).spec
    model = spec.describe(spec.config_class.load(out))
    speed, held_out = training_summary([out])
    source = f"a {Path(cfg.model_config).name}" if cfg.model_config else \
        f"{Path(cfg.init).name}, further" if cfg.init else f"a {cfg.preset}"
    print(f"pre-trained {source} {model} with the {cfg.objective} objective: {speed}")
    print("held-out: " + ", ".join(f"{key} {value:.4f}" for key, value in held_out.items()))
    print(f"wrote the model, its tokenizer, metrics.jsonl and training_curves.png to {out}")


def seed_runs(out: Path, results: dict) -> list[Path]:
    """The folders of a task run's seeds (the output folder itself for one seed)."""
    if "seeds" not in results:
        return [out]
    return [out / f"seed-{run['seed']}" for run in results["runs"]]


def run_finetune(cfg: Any) -> None:
    """Fine-tune, print the dev results and what was trained, how fast, and where it is."""
    from .recipes.finetune import CONFIG_NAME, run_finetuning

    results = run_finetuning(cfg)
    out = Path(cfg.out)
    recorded = json.loads((out / CONFIG_NAME).read_text(encoding="utf-8"))
    runs = seed_runs(out, results)
    speed, _ = training_summary(runs, round(recorded["train_examples"] * cfg.epochs) * len(runs))
    print_results(results)
    how = "trained a feature-based head on" if cfg.mode == "features" else "fine-tuned"
    model = f" {cfg.model}"
    if cfg.arch != "head":  # a family trained from scratch by a recipe of its own
        how, model = import_module(family_named(cfg.arch).recipe).describe_run(cfg), ""
    print(f"{how}{model} for {cfg.task}, {recorded['train_examples']:,} training examples x "
          f"{epochs(cfg.epochs)}{f' x {len(runs)} seeds' if len(runs) > 1 else ''}: {speed}")
    if len(runs) > 1:
        print(f"wrote each seed's best model, eval_results.json, metrics.jsonl and learning_curve.png to "
              f"{out}/seed-N, and the seeds' summary to {out / 'eval_results.json'}")
    else:
        print(f"wrote the best model, eval_results.json, metrics.jsonl and learning_curve.png to {out}")


def run_distill(cfg: Any) -> None:
    """Distil, print the student's dev results and what was trained, how fast, and where it is."""
    from .recipes.distill import CONFIG_NAME, run_distillation

    results = run_distillation(cfg)
    out = Path(cfg.out)
    recorded = json.loads((out / CONFIG_NAME).read_text(encoding="utf-8"))
    speed, _ = training_summary([out], round(recorded["transfer_examples"] * cfg.epochs))
    if "split" in results:
        print_results(results)
    student = (f"{cfg.student or 'the teacher'} cut to {cfg.student_layers} layers" if cfg.student_layers
               else cfg.student or f"a random-weight {cfg.preset} encoder")
    print(f"distilled {cfg.teacher} ({recorded['teacher_parameters']:,} parameters) into {student} "
          f"({recorded['student_parameters']:,} parameters), {recorded['transfer_examples']:,} transfer examples x "
          f"{epochs(cfg.epochs)}: {speed}")
    print(f"wrote the student, eval_results.json, metrics.jsonl and learning_curve.png to {out}")


def run_evaluate(cfg: Any) -> None:
    """Score and print; write JSON when asked."""
    from .files import write_json_atomic
    from .recipes.finetune import run_evaluation

    results = run_evaluation(cfg.task, cfg.data, cfg.model, cfg.split, cfg.batch_size, cfg.precision, cfg.device)
    print_results(results)
    if cfg.out:
        write_json_atomic(cfg.out, results)


def run_predict(cfg: Any) -> None:
    """Predict and write the file."""
    from .recipes.finetune import run_prediction

    count = run_prediction(cfg.model, Path(cfg.input), Path(cfg.out), cfg.batch_size, cfg.precision, cfg.device)
    print(f"wrote {count:,} predictions to {cfg.out}")


def run_export(cfg: Any) -> None:
    """Export and report the size on disk."""
    from .uses.export import export_model

    out = export_model(cfg.model, cfg.format, cfg.out, force=cfg.force, device=cfg.device)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    print(f"wrote the {cfg.format} export of {cfg.model} to {out} ({size / 2**20:.1f} MiB)")


def run_demo(cfg: Any) -> None:
    """Run the demo (it prints its own table)."""
    from .recipes.demo import run_demo as demo

    demo(cfg)


def run_explain_attention(cfg: ExplainAttentionConfig) -> None:
    """Draw the attention maps."""
    from .uses.explain import explain_attention

    path = explain_attention(cfg.model, cfg.text, cfg.out, cfg.text_pair, cfg.layer, cfg.head, cfg.model_name,
                             cfg.device)
    print(f"wrote {path}")


def run_explain_senses(cfg: ExplainSensesConfig) -> None:
    """Draw the word's vectors and print how well they separate by sense."""
    from .uses.explain import explain_senses

    report = explain_senses(cfg.model, cfg.word, cfg.out, cfg.sentences, cfg.layer, cfg.model_name, cfg.vectors,
                            cfg.device)
    print(report.summary())
    print(f"wrote {cfg.out}")


def run_embed(cfg: Any) -> None:
    """Embed the file and print a one-line summary."""
    from .uses.embed import run_embed as embed

    summary = embed(cfg)
    counts = {"truncated": "truncated", "skipped_empty": "blank skipped", "dropped_words": "words without a vector"}
    notes = [f"{summary[key]:,} {what}" for key, what in counts.items() if summary[key]]
    rows, width = summary["shape"]
    print(f"embedded {summary['lines']:,} lines -> {rows:,} x {width} vectors in {summary['path']}"
          + (f" (+ {summary['index']})" if "index" in summary else "")
          + f", {summary['seconds']:.1f} s" + (f"; {', '.join(notes)}" if notes else ""))


def run_generate(cfg: Any) -> None:
    """Continue the prompts (the use prints them)."""
    from .uses.generate import run_generate as generate

    generate(cfg)


def run_wic(cfg: Any) -> None:
    """Probe the model's layers on WiC and print the table."""
    from .uses.wic import format_results
    from .uses.wic import run_wic as probe

    print(format_results(probe(cfg)))


def run_static_train(cfg: Any) -> None:
    """Train (or import) static vectors and print the summary with the evaluation."""
    from .recipes.static_vectors import format_summary, train

    print(format_summary(train(cfg)))
    print(f"wrote the vectors, config.json, metrics.jsonl, training_curves.png and results.json to {cfg.out}")


def run_static_evaluate(cfg: Any) -> None:
    """Score the vectors on the word-similarity and analogy benchmarks."""
    from .recipes.static_vectors import evaluate, format_evaluation

    print(format_evaluation(evaluate(cfg)))


def run_static_neighbors(cfg: Any) -> None:
    """Print each word's nearest neighbours."""
    from .recipes.static_vectors import format_neighbors, neighbors

    print(format_neighbors(neighbors(cfg)))


def run_translate_train(cfg: Any) -> None:
    """Train the translation model and print where its best validation perplexity was."""
    from .recipes.translate import train

    results = train(cfg)
    print(f"trained {results['steps']:,} steps ({results['epochs']:.2f} epochs, {results['training_seconds'] / 60:.1f} "
          f"min); best {results['split']} perplexity {results['perplexity']:.2f} at step {results['step']:,}; "
          f"wrote the model to {cfg.out}")


def run_translate_evaluate(cfg: Any) -> None:
    """Translate a split and print its BLEU."""
    from .recipes.translate import evaluate, format_bleu

    print(format_bleu(evaluate(cfg)))
    print(f"wrote the translations and bleu.json to {cfg.out}")


def run_translate_text(cfg: Any) -> None:
    """Translate a text file (printed unless --out)."""
    from .recipes.translate import translate_text

    translations = translate_text(cfg)
    if cfg.out:
        print(f"wrote {len(translations):,} translations to {cfg.out}")
    else:
        print("\n".join(translations))


def run_reproduce(cfg: Any) -> None:
    """List the claims, or run one and print its table."""
    from .claims import claim_list, run_claim

    if cfg.list:
        print(claim_list())
        return
    if not cfg.claim:
        raise UserError("name a claim to run (bertology reproduce --list shows them)")
    run_claim(cfg)
    out = Path(cfg.out)
    print((out / "results.md").read_text(encoding="utf-8"))
    print(f"wrote results.json, results.md, the plots and every run to {out}")


def run_serve(cfg: Any) -> None:
    """Serve until SIGINT or SIGTERM."""
    from .uses.serve import run_server

    run_server(cfg)


@dataclass(frozen=True)
class Command:
    """A command: its name ("tokenizer train" for an action of a group), its help, where its
    settings dataclass is ("module:Class", imported only when the command runs) and what runs it."""

    name: str
    help: str
    settings: str
    run: Callable[[Any], None]
    description: str | None = None
    config_file: bool = False  # takes --config FILE
    extra: str | None = None  # the pyproject extra its imports come from, for a missing package

    def settings_class(self) -> type:
        """The settings dataclass (importing its module)."""
        module, name = self.settings.split(":")
        return getattr(import_module(module, __package__) if module else sys.modules[__name__], name)


FLAGS_OR_FILE = " Every flag can also be a key of a --config file (TOML or JSON; flags win)."
COMMANDS = [
    Command("demo", "the whole story offline in minutes: vocabulary, pre-training, fine-tuning vs from scratch",
            ".recipes.demo:DemoConfig", run_demo,
            description="Pre-train a tiny BERT on the Python standard library's own documentation, fine-tune it to "
            "tell which part of the library a docstring comes from, and compare with the same model trained from "
            "scratch. Writes results.json and PNGs into --out."),
    Command("tokenizer train", "train a WordPiece, unigram or byte-level BPE vocabulary on text files or folders",
            ":TokenizerTrainConfig", run_tokenizer_train,
            description="Train a BERT WordPiece vocabulary, or with --model unigram a SentencePiece-style unigram "
            "one (T5's; --sentinels 100 adds its <extra_id_N> tokens), [PAD]=0 [UNK] [CLS] [SEP] [MASK] first, and "
            "write vocab.txt, tokenizer.json and tokenizer_config.json into --out; with --model bpe GPT-2's "
            "byte-level BPE, written as transformers writes GPT-2's (vocab.json, merges.txt, tokenizer.json, "
            "tokenizer_config.json)."),
    Command("info", "print a model directory's family, tokenizer, the commands that take it, size and config",
            ":InfoConfig", run_info),
    Command("pretrain", "pre-train an encoder on raw text (BERT, RoBERTa, ALBERT, ELECTRA or a left-to-right LM)",
            ".recipes.pretrain:PretrainConfig", run_pretrain, config_file=True,
            description="Pre-train an encoder on your text. Interrupt with Ctrl-C at any time: a checkpoint is "
            "written; --resume continues." + FLAGS_OR_FILE),
    Command("finetune", "fine-tune an encoder on a task (GLUE, CoNLL-2003, SQuAD, WiC, or your own CSV/TSV/JSONL)",
            ".recipes.finetune:FinetuneConfig", run_finetune, config_file=True,
            description="Fine-tune a pre-trained encoder with one small head. Writes the best model (by the task's "
            "main dev metric), eval_results.json, metrics.jsonl and learning_curve.png into --out." + FLAGS_OR_FILE),
    Command("evaluate", "score a fine-tuned model on a task's dev (or other) split",
            ".recipes.finetune:EvaluateConfig", run_evaluate),
    Command("predict", "predict with a fine-tuned model: GLUE submission TSV, SQuAD predictions JSON, CoNLL tags, "
            "WiC T/F", ".recipes.finetune:PredictConfig", run_predict,
            description="Input formats: the task's official format (GLUE test.tsv, SQuAD JSON, CoNLL file, WiC "
            "X.data.txt), or for sentence tasks a .txt with one text per line (a tab between the two texts of a "
            "pair) and for tagging a .txt with one sentence of space-separated words per line. Output: GLUE-style "
            "index<TAB>prediction TSV, {id: answer} JSON, CoNLL columns (word [gold] predicted), or WiC's T or F "
            "a line."),
    Command("distill", "distil a fine-tuned teacher into a small, fast student", ".recipes.distill:DistillConfig",
            run_distill, config_file=True,
            description="The teacher labels a transfer set (the task's training text and any --unlabeled files; its "
            "outputs are cached and reused by later runs) and a student learns its soft targets. Writes the best "
            "student (by the task's main dev metric), eval_results.json (with the teacher's score), metrics.jsonl "
            "and learning_curve.png into --out." + FLAGS_OR_FILE),
    Command("explain attention", "heatmaps of the attention weights of one head, one layer's heads, or all",
            ":ExplainAttentionConfig", run_explain_attention,
            description="Draw attention weights with the WordPiece tokens ([CLS] and [SEP] included) on both axes: "
            "row = the token attending, column = the token attended to. Layers are numbered 1..L, heads 1..heads."),
    Command("explain senses", "an ambiguous word's contextual vectors by sense, beside its one static vector",
            ":ExplainSensesConfig", run_explain_senses,
            description="Embed a word in sentences that use it in different senses, project its contextual vectors "
            "(mean of its WordPieces at --layer) to 2-D with PCA, and draw them beside the static view: its input "
            "embedding, the same vector in every sentence. Prints the mean cosine similarity within vs across "
            "senses."),
    Command("embed", "sentence or word vectors from any BERT model, written to .npy or .jsonl",
            ".uses.embed:EmbedConfig", run_embed,
            description="Embed every line of a text file (or one field of each JSONL object) with any model "
            "directory (pre-trained, fine-tuned: the head is dropped, transformers or sentence-transformers BERT). "
            "--out ending in .npy writes one (lines, width) float32 array for sentences; for tokens, all word "
            "vectors stacked plus an index (vectors.npy -> vectors.index.jsonl) with each line's rows and words. "
            "--out ending in .jsonl writes one object per line. Blank lines stop with an error (row i is line i) "
            "unless --skip-empty."),
    Command("generate", "continue prompts with a GPT: greedy, sampling (temperature, top-k, top-p) or beam search",
            ".uses.generate:GenerateConfig", run_generate,
            description="Continue each --prompt (or each line of --input) with a GPT trained by `bertology pretrain "
            "--arch gpt`, printing the prompt followed by its continuation. Greedy unless --do-sample or "
            "--num-beams; a continuation ends at the end of a text, a --stop string or --max-new-tokens."),
    Command("wic", "Word-in-Context probe: do a model's layers tell a word's senses apart?",
            ".uses.wic:WicConfig", run_wic,
            description="For every layer of a BERT, GPT, XLNet, T5 encoder, ELMo or AWD-LSTM (CoVe: [GloVe; CoVe] "
            "and each half; static vectors: the one vector): the target word's vector in each sentence of a WiC pair, a logistic regression on "
            "[v1; v2; v1*v2; |v1-v2|] trained on WiC's train "
            "split, accuracy on its dev split (the paper: chance 50.0, ELMo 57.7, BERT-large 65.5)."),
    Command("static train", "train word2vec, fastText or GloVe vectors on a corpus (or import a vectors file)",
            ".recipes.static_vectors:StaticTrainConfig", run_static_train, config_file=True,
            description="Train static word vectors (one per word type) on the same corpus readers as pretrain: "
            "word2vec and fastText through gensim, GloVe in bertology. Holds out a share of the documents for "
            "OOV rates, evaluates on WordSim-353, SimLex-999 and the Google analogies, and writes a vectors "
            "directory usable wherever a model directory is." + FLAGS_OR_FILE),
    Command("static evaluate", "Spearman on WordSim-353 and SimLex-999, 3CosAdd accuracy on the Google analogies",
            ".recipes.static_vectors:StaticEvalConfig", run_static_evaluate),
    Command("static neighbors", "the nearest neighbours of words (fastText: also of words never seen)",
            ".recipes.static_vectors:StaticNeighborsConfig", run_static_neighbors),
    Command("translate train", "train CoVe's English-to-German attentional LSTM translation model (Multi30k)",
            ".recipes.translate:TranslateTrainConfig", run_translate_train, config_file=True,
            description="Train McCann et al.'s MT-LSTM encoder-decoder on a parallel corpus folder ({split}.en, "
            "{split}.de, plain or .gz) over fixed English word vectors (--vectors: GloVe from `bertology static "
            "train`). Its encoder gives CoVe features: `bertology finetune --mode features --model OUT`. Writes the "
            "model with the best validation perplexity, metrics.jsonl and training_curves.png into --out; "
            "interrupt at any time and continue with --resume." + FLAGS_OR_FILE),
    Command("translate evaluate", "corpus BLEU (sacrebleu) of greedy decoding and beam search on a split",
            ".recipes.translate:TranslateEvalConfig", run_translate_evaluate),
    Command("translate text", "translate English sentences (one per line) with a trained CoVe translation model",
            ".recipes.translate:TranslateTextConfig", run_translate_text),
    Command("reproduce", "a paper's claim as an experiment: pre-train, fine-tune over seeds, table and plots",
            ".claims:ReproduceConfig", run_reproduce,
            description="Run one of the papers' claims at this machine's scale (--list shows the eleven, and the "
            "summary of every family on six tasks): it "
            "pre-trains what it needs (cached by content and shared between claims), fine-tunes over seeds and "
            "writes results.json, results.md (median and range, and whether the claim's direction reproduced) and "
            "PNG plots into --out. Interrupted, it resumes with the same --out."),
    Command("serve", "serve a model over HTTP: POST /predict, /embed or /generate, GET /health and /info, docs at "
            "/docs", ".uses.serve:ServeConfig", run_serve, extra="serve",
            description="Serve a fine-tuned model (POST /predict: labels with probabilities, scores, tags or answer "
            "spans), any encoder (POST /embed: sentence vectors) or a GPT (POST /generate: continuations) as a "
            "JSON API. Concurrent requests are micro-batched. SIGINT/SIGTERM finish the requests in flight, then "
            "exit."),
    Command("export", "export a model for deployment: transformers copy (hf), PyTorch int8, or ONNX",
            ".uses.export:ExportConfig", run_export,
            description="`bertology evaluate` and `predict` run every export. Outputs are built beside --out and "
            "renamed into place."),
]
GROUPS = {"tokenizer": "train a WordPiece or unigram vocabulary",
          "static": "static word vectors before BERT: word2vec, fastText, GloVe",
          "explain": "draw attention maps, or a word's contextual vs static vectors",
          "translate": "CoVe's translation model: train it, score it with BLEU, translate text"}


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line pointing to the command's own `--help`; a flag
    is never guessed from its first letters (`--epoch` is not `--epochs`); and an unknown flag
    is named before any missing one (`--taks sst2` is a typo, not a missing `--task`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102
        if args is not None and not self._subparsers:  # a command's own parser: every flag it takes is known
            unknown = [word for word in itertools.takewhile(lambda word: word != "--", args)
                       if word.startswith("--") and word.split("=")[0] not in self._option_string_actions]
            if unknown:
                self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return super().parse_known_args(args, namespace)

    def error(self, message: str):  # noqa: D102
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser(argv: list[str]) -> ArgumentParser:
    """The parser: every command listed; the one `argv` names also gets its flags (see the module docstring)."""
    parser = ArgumentParser(
        prog="bertology",
        description="BERT end to end: static word vectors, WordPiece vocabularies, pre-training, fine-tuning, features, "
                    "export, serving.",
    )
    parser.add_argument("--version", action="version", version=f"bertology {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    words = [arg for arg in argv if not arg.startswith("-")]  # the command's name comes before its flags
    actions = {}
    for command in COMMANDS:
        group, _, action = command.name.rpartition(" ")
        if group and group not in actions:
            actions[group] = commands.add_parser(group, help=GROUPS[group]).add_subparsers(
                dest="action", metavar="ACTION", required=True)
        sub = (actions[group] if group else commands).add_parser(
            action, help=command.help, description=command.description or command.help)
        if words[: len(command.name.split())] == command.name.split():
            add_command_settings(sub, command, argv)
    return parser


def add_command_settings(parser: argparse.ArgumentParser, command: Command, argv: list[str]) -> None:
    """The command's flags, from its settings dataclass (importing its module), and --config FILE."""
    try:
        cls = command.settings_class()
    except ModuleNotFoundError as err:
        if command.extra is None:
            raise
        raise UserError(f"`bertology {command.name}` needs {err.name}: pip install 'bertology[{command.extra}]'") \
            from None
    given = config_file_values(cls, argv) if command.config_file else {}
    add_settings(parser, cls, given)
    if command.config_file:
        parser.add_argument("--config", metavar="FILE", help="a TOML or JSON file with any of these settings (keys "
                            "as the flags' names with _; flags win over the file)")
    parser.set_defaults(**given, command_to_run=command, settings_class=cls, command_parser=parser)


@contextlib.contextmanager
def no_empty_folder_left(paths: list[Path]) -> Iterator[None]:
    """If the body fails, remove the folders of `paths` that it created and left without a file."""
    created = []
    for path in paths:
        missing = [folder for folder in (path, *path.parents) if not folder.exists()]
        if missing:
            created.append(missing[-1])  # the outermost folder the run would create
    try:
        yield
    except BaseException:
        for folder in created:
            if folder.is_dir() and all(p.is_dir() for p in folder.rglob("*")):
                shutil.rmtree(folder)
        raise


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (`kill`, a job's end) stops a command as Ctrl-C does, so that its temporary files and
    staging folders are removed on the way out (the training loop and the server handle both signals
    their own way while they run)."""
    try:
        previous = signal.signal(signal.SIGTERM, _interrupt)
    except ValueError:  # not the main thread: signals are not ours to handle
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def output_folders(cfg: Any) -> list[Path]:
    """Where the settings say the command writes: its output folders, and the folders of its output files."""
    folders = []
    for name, field in setting_fields(cfg).items():
        value = getattr(cfg, name)
        if field.metadata["output"] and value:
            folders.append(Path(value) if field.metadata["output"] == "dir" else Path(value).parent)
    return folders


def parse(argv: list[str]) -> tuple[Command, Any]:
    """The command `argv` names and its settings: the dataclass's defaults, then the config
    file's values, then the flags; a model given by name becomes its installed folder. Raises
    SystemExit after --help, --version or a usage mistake, UserError for a model not found."""
    args = build_parser(argv).parse_args(argv)
    for name, field in setting_fields(args.settings_class).items():
        if field.metadata["was_positional"]:
            given = vars(args).pop(FORMERLY_POSITIONAL + name)
            if given:
                print(f"bertology: {renamed_note(f'{name.upper()} as a positional argument', option_name(name))}",
                      file=sys.stderr)
                setattr(args, name, [*(getattr(args, name) or []), *given])
            if field.metadata["required"] and not getattr(args, name):
                args.command_parser.error(f"the following arguments are required: {option_name(name)}")
    names = {field.name for field in dataclasses.fields(args.settings_class)}
    cfg = args.settings_class(**{k: v for k, v in vars(args).items() if k in names})
    for name, field in setting_fields(cfg).items():
        if field.metadata["model_dir"] and getattr(cfg, name):
            setattr(cfg, name, str(resolve_model_dir(getattr(cfg, name))))
    check_settings(cfg)  # flags and file alike, and where the outputs go, before any work
    return args.command_to_run, cfg


def prepare_threads() -> None:
    """Before PyTorch loads: its idle OpenMP threads sleep instead of spinning (the user's own
    OMP_WAIT_POLICY wins).

    PyTorch runs an operation's share of work on each of its threads, and between operations
    GNU OpenMP's idle threads spin for a while, waiting for the next. On a machine that other
    programs keep busy, a spinning thread holds the core that another thread of the same
    operation waits for: the demo's pre-training on 2 threads beside one competing process
    fell to a tenth of its speed on 1 thread. Sleeping costs a wake-up per operation instead,
    and keeps every core the fastest choice, busy or free (bench/threads.py measures this;
    docs/results/threads.md has the numbers). A short spin before sleeping (GNU OpenMP's GOMP_SPINCOUNT)
    was measured too: each count gains on a free machine what it loses beside a competitor, so none
    replaces sleeping. The runtime reads the policy once, when PyTorch loads.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def apply_threads(cfg: Any) -> None:
    """A command that computes runs on its --threads (or $BERTOLOGY_THREADS, or every core:
    config.resolve_threads), written back into its settings as the number it runs with; one that
    places a model has its --device checked (a model that runs on the CPU only takes "auto" as the CPU,
    so "auto" stays "auto")."""
    if isinstance(cfg, Threads):
        import torch

        cfg.threads = resolve_threads(cfg.threads)
        torch.set_num_threads(cfg.threads)
    if isinstance(cfg, Device):  # checked before any work: `--device cuda` without a GPU is one line
        from .ops import resolve_device

        resolve_device(cfg.device)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `bertology` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else [str(arg) for arg in argv]
    prepare_threads()
    try:
        try:
            command, cfg = parse(argv)
        except SystemExit as exit_:  # argparse has printed the help, the version or the usage mistake
            return exit_.code or 0
        apply_threads(cfg)
        with no_empty_folder_left(output_folders(cfg)), sigterm_interrupts():
            command.run(cfg)
        sys.stdout.flush()  # a closed pipe shows up here, inside these handlers, not at exit
    except UserError as err:
        print(f"bertology: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bertology: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`bertology info DIR | head`): stop quietly, as other command-line tools do,
        # with stdout pointed at /dev/null so that Python's own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        # A full disk is the machine's state, not a bug: say where, in one line (writes through
        # files.py name their file already; this is every other write).
        print(f"bertology: error: {err.filename or 'a write'}: {err.strerror}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
