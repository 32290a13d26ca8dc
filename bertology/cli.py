"""The `bertology` command line.

Each subcommand is a small `add_*` function that declares its flags and a
`run_*` function that does the work through the Python API. User mistakes
(`UserError`) print one line and exit with status 2; they never show a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__
from .config import EpochLoop
from .errors import UserError
from .models.bert import PRESETS
from .training.objectives import OBJECTIVES


def positive_int(text: str) -> int:
    """argparse type: an integer > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_tokenizer(commands: argparse._SubParsersAction) -> None:
    """`bertology tokenizer train`: learn a WordPiece vocabulary from text files."""
    tokenizer = commands.add_parser("tokenizer", help="train a WordPiece vocabulary")
    actions = tokenizer.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = actions.add_parser(
        "train",
        help="train a WordPiece vocabulary on text files or folders",
        description="Train a BERT WordPiece vocabulary ([PAD]=0 [UNK] [CLS] [SEP] [MASK] first) and "
        "write vocab.txt, tokenizer.json and tokenizer_config.json into --out.",
    )
    train.add_argument("corpus", nargs="+", type=Path, help="text files, or folders of .txt/.raw files")
    train.add_argument("--vocab-size", type=positive_int, default=30522, help="vocabulary size (default: 30522)")
    train.add_argument("--cased", action="store_true", help="keep case and accents (default: uncased)")
    train.add_argument("--min-frequency", type=positive_int, default=2, help="drop pieces seen fewer times (default: 2)")
    train.add_argument("--out", type=Path, required=True, help="output directory")
    train.set_defaults(run=run_tokenizer_train)


def run_tokenizer_train(args: argparse.Namespace) -> None:
    """Train the vocabulary and report where it went."""
    from .data.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(
        args.corpus, vocab_size=args.vocab_size, cased=args.cased, out_dir=args.out, min_frequency=args.min_frequency
    )
    print(f"wrote a {'cased' if args.cased else 'uncased'} vocabulary of {tokenizer.vocab_size} tokens to {args.out}")


def add_info(commands: argparse._SubParsersAction) -> None:
    """`bertology info DIR`: describe a model directory."""
    info = commands.add_parser("info", help="print a model directory's config, size and vocabulary")
    info.add_argument("model", type=Path, help="model directory (bertology or transformers BERT layout)")
    info.set_defaults(run=run_info)


def run_info(args: argparse.Namespace) -> None:
    """Load the model (which validates every tensor) and print what it is."""
    from .inference.modeldir import load_model

    model = load_model(args.model)
    config = model.config
    vocab = args.model / "vocab.txt"
    vocab_entries = sum(1 for _ in vocab.open("rb")) if vocab.is_file() else None
    print(f"model:        {args.model}")
    print(f"architecture: {type(model).__name__}")
    print(f"parameters:   {model.num_parameters():,}")
    print(f"vocabulary:   {vocab_entries if vocab_entries is not None else 'no vocab.txt'} tokens in vocab.txt, "
          f"{config.vocab_size} embedding rows")
    print("config:")
    for key, value in config.to_dict().items():
        print(f"  {key}: {value}")


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (the full usage is one `--help` away)."""

    def error(self, message: str):  # noqa: D102
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def add_pretrain(commands: argparse._SubParsersAction) -> None:
    """`bertology pretrain`: pre-train an encoder on raw text."""
    p = commands.add_parser(
        "pretrain", help="pre-train an encoder on raw text (BERT, RoBERTa, ALBERT, ELECTRA or a left-to-right LM)",
        description="Pre-train an encoder on your text. Every flag can also be a key of a --config file "
        "(TOML or JSON; flags win). Interrupt with Ctrl-C at any time: a checkpoint is written; --resume continues.",
    )
    S = argparse.SUPPRESS  # unset flags stay out of the namespace, so config-file values survive
    data = p.add_argument_group("data")
    data.add_argument("--corpus", nargs="+", default=S, metavar="PATH", help="text files or folders")
    data.add_argument("--doc-format", choices=["auto", "lines", "file"], default=S,
                      help="lines: a sentence or paragraph per line, blank lines between documents; "
                           "file: one document per file; auto (default): decide per file")
    data.add_argument("--skip-bad-lines", action="store_true", default=S,
                      help="skip and count lines that are not UTF-8 (default: stop with an error)")
    data.add_argument("--tokenizer", default=S, metavar="DIR", help="tokenizer directory (default: train one)")
    data.add_argument("--vocab-size", type=positive_int, default=S, help="size of a trained vocabulary (30522)")
    data.add_argument("--cased", action="store_true", default=S, help="train a cased vocabulary")
    data.add_argument("--cache-dir", default=S, help="where tokenized shards are kept ($BERTOLOGY_CACHE)")
    data.add_argument("--seq-len", type=positive_int, default=S, help="sequence length in tokens (128)")
    data.add_argument("--short-seq-prob", type=float, default=S, help="share of shorter pairs (0.1)")
    data.add_argument("--whole-word-masking", action="store_true", default=S, help="mask all pieces of a word")
    data.add_argument("--max-predictions", type=positive_int, default=S, help="cap on masked tokens per sequence")
    data.add_argument("--eval-fraction", type=float, default=S, help="share of documents held out (0.01)")
    model = p.add_argument_group("model")
    model.add_argument("--preset", choices=list(PRESETS), default=S, help="model size (mini)")
    model.add_argument("--model-config", default=S, metavar="FILE", help="a config.json instead of a preset")
    model.add_argument("--objective", choices=list(OBJECTIVES), default=S, help="pre-training objective (bert)")
    model.add_argument("--pre-layer-norm", action="store_true", default=S, help="LayerNorm before each sub-layer")
    model.add_argument("--embedding-size", type=positive_int, default=S, help="ALBERT's factorized embedding width")
    model.add_argument("--share-layers", action="store_true", default=S, help="ALBERT's cross-layer sharing")
    model.add_argument("--no-segment-embeddings", action="store_true", default=S, help="drop segment embeddings")
    train = p.add_argument_group("training")
    train.add_argument("--config", type=Path, help="TOML or JSON file with any of these settings")
    train.add_argument("--out", default=S, metavar="DIR", help="output directory")
    train.add_argument("--batch-size", type=positive_int, default=S, help="sequences per micro-batch (32)")
    train.add_argument("--grad-accum", type=positive_int, default=S, help="micro-batches per step (1)")
    train.add_argument("--lr", type=float, default=S, help="peak learning rate (5e-4)")
    train.add_argument("--warmup", type=float, default=S, help="warmup: a fraction (< 1) or steps (0.06)")
    train.add_argument("--weight-decay", type=float, default=S, help="AdamW weight decay (0.01)")
    train.add_argument("--schedule", choices=["linear", "slanted_triangular", "constant"], default=S,
                       help="learning-rate schedule (linear: warmup then decay over the step or time budget)")
    train.add_argument("--max-steps", type=positive_int, default=S, help="step budget")
    train.add_argument("--max-time", default=S, help="wall-clock budget, e.g. 20m (the schedule is fitted to it)")
    train.add_argument("--precision", choices=["auto", "fp32", "bf16"], default=S, help="auto: bf16 where fast")
    train.add_argument("--compile", action="store_true", default=S, help="torch.compile the model")
    train.add_argument("--seed", type=int, default=S)
    train.add_argument("--eval-every", type=int, default=S, help="evaluate every N steps (200)")
    train.add_argument("--eval-batches", type=positive_int, default=S, help="held-out batches per evaluation (20)")
    train.add_argument("--log-every", type=positive_int, default=S, help="log every N steps (10)")
    train.add_argument("--save-every", type=int, default=S, help="checkpoint every N steps (500)")
    train.add_argument("--keep-last", type=positive_int, default=S, help="checkpoints to keep (2)")
    train.add_argument("--resume", action="store_true", default=S, help="continue from the last checkpoint")
    train.add_argument("--no-progress", dest="progress", action="store_false", default=S, help="no progress bar")
    p.set_defaults(run=run_pretrain)


def file_and_flag_settings(config_class: type, args: argparse.Namespace) -> tuple[dict, dict]:
    """(settings of the --config file, settings given as flags); flags were parsed with
    SUPPRESS defaults, so only those actually given are present and win over the file."""
    from .config import read_settings

    values = read_settings(config_class, args.config) if args.config else {}
    flags = {k: v for k, v in vars(args).items() if k not in ("run", "command", "config")}
    return values, flags


MODEL_FLAGS = {"pre_layer_norm": "pre_layer_norm", "embedding_size": "embedding_size",
               "share_layers": "share_layers", "no_segment_embeddings": "type_vocab_size"}


def run_pretrain(args: argparse.Namespace) -> None:
    """Merge defaults < config file < flags, then run."""
    from .recipes.pretrain import PretrainConfig, run_pretraining

    values, flags = file_and_flag_settings(PretrainConfig, args)
    model = dict(values.get("model", {}))
    for flag, field_name in MODEL_FLAGS.items():
        if flag in flags:
            value = flags.pop(flag)
            model[field_name] = 0 if flag == "no_segment_embeddings" else value
    status = run_pretraining(PretrainConfig(**{**values, **flags, "model": model}))
    if status == "interrupted":
        raise SystemExit(130)


def add_epoch_loop_flags(parser: argparse.ArgumentParser, epochs_help: str, lr: float) -> argparse._ArgumentGroup:
    """The "training" group fine-tuning and distillation share (config.EpochLoop's fields, whose
    defaults it shows; `lr` is the command's own default), with --config."""
    S = argparse.SUPPRESS
    default = EpochLoop()
    train = parser.add_argument_group("training")
    train.add_argument("--config", type=Path, help="TOML or JSON file with any of these settings")
    train.add_argument("--epochs", type=float, default=S, help=f"{epochs_help} ({default.epochs:g})")
    train.add_argument("--lr", type=float, default=S, help=f"peak learning rate ({lr:g})")
    train.add_argument("--batch-size", type=positive_int, default=S, help=f"examples per step ({default.batch_size})")
    train.add_argument("--warmup", type=float, default=S, help=f"warmup: a fraction (< 1) or steps ({default.warmup:g})")
    train.add_argument("--weight-decay", type=float, default=S, help=f"AdamW weight decay ({default.weight_decay:g})")
    train.add_argument("--schedule", choices=["linear", "slanted_triangular", "constant"], default=S,
                       help="learning-rate schedule (linear; slanted_triangular is ULMFiT's)")
    train.add_argument("--precision", choices=["auto", "fp32", "bf16"], default=S, help="auto: bf16 where fast")
    train.add_argument("--seed", type=int, default=S, help=f"random seed ({default.seed})")
    train.add_argument("--resume", action="store_true", default=S, help="continue an interrupted run")
    train.add_argument("--no-progress", dest="progress", action="store_false", default=S, help="no progress bar")
    return train


def add_finetune(commands: argparse._SubParsersAction) -> None:
    """`bertology finetune`: train a task head (and the encoder) on labelled data."""
    p = commands.add_parser(
        "finetune", help="fine-tune an encoder on a task (GLUE, CoNLL-2003, SQuAD, or your own CSV/TSV/JSONL)",
        description="Fine-tune a pre-trained encoder with one small head. Writes the best model (by the task's "
        "main dev metric), eval_results.json, metrics.jsonl and learning_curve.png into --out. Every flag can "
        "also be a key of a --config file (TOML or JSON; flags win).",
    )
    S = argparse.SUPPRESS
    task = p.add_argument_group("task and data")
    task.add_argument("--task", default=S, help="cola sst2 mrpc stsb qqp mnli qnli rte wnli conll2003 squad squad_v2, "
                      "or classification / regression / pair-classification for your own files")
    task.add_argument("--data", default=S, metavar="PATH", help="the task's folder (or file) in its official format")
    task.add_argument("--model", default=S, metavar="DIR", help="pre-trained model directory (bertology or transformers)")
    task.add_argument("--out", default=S, metavar="DIR", help="output directory")
    task.add_argument("--train-file", default=S, help="your own task: training CSV/TSV/JSONL")
    task.add_argument("--dev-file", default=S, help="your own task: dev CSV/TSV/JSONL")
    task.add_argument("--text-column", default=S, help="column of the text (text)")
    task.add_argument("--text-pair-column", default=S, help="column of the second text, for pairs")
    task.add_argument("--label-column", default=S, help="column of the label (label)")
    task.add_argument("--labels", nargs="+", default=S, help="the label set (default: those of the training file)")
    task.add_argument("--max-train-examples", type=positive_int, default=S, help="a reproducible random subset")
    inputs = p.add_argument_group("inputs")
    inputs.add_argument("--max-seq-len", type=positive_int, default=S, help="tokens per row (128; SQuAD 384)")
    inputs.add_argument("--long-inputs", choices=["truncate", "window"], default=S,
                        help="too-long inputs: cut (counted and reported) or covered by overlapping windows")
    inputs.add_argument("--doc-stride", type=positive_int, default=S, help="tokens between window starts (128)")
    inputs.add_argument("--max-query-length", type=positive_int, default=S, help="SQuAD: question tokens kept (64)")
    inputs.add_argument("--max-answer-length", type=positive_int, default=S, help="SQuAD: longest answer in tokens (30)")
    inputs.add_argument("--null-score-threshold", type=float, default=S, help="SQuAD 2.0: no-answer threshold (0)")
    train = add_epoch_loop_flags(p, "passes over the training set", lr=5e-5)
    train.add_argument("--layer-lr-decay", type=float, default=S,
                       help="ULMFiT's discriminative learning rates: each layer down gets this factor (1 = off)")
    train.add_argument("--gradual-unfreezing", action="store_true", default=S,
                       help="ULMFiT: train the top layer first, one more layer each epoch")
    train.add_argument("--seeds", type=positive_int, default=S, help="run N seeds; report median and spread")
    feats = p.add_argument_group("feature-based mode (frozen encoder, only the head trains)")
    feats.add_argument("--mode", choices=["finetune", "features"], default=S, help="finetune (default) or features")
    feats.add_argument("--feature-layers", default=S,
                       help="embeddings, last, second_to_last, sum_last_four (default), concat_last_four, sum_all, "
                            "mix (ELMo's learned mix), or layer numbers like 4,5,6")
    feats.add_argument("--feature-head", choices=["linear", "bilstm"], default=S, help="the head (linear)")
    feats.add_argument("--feature-pooling", choices=["mean", "cls", "max"], default=S, help="sentence tasks (mean)")
    feats.add_argument("--cache-dir", default=S, help="where computed features are kept ($BERTOLOGY_CACHE)")
    p.set_defaults(run=run_finetune)


def print_results(results: dict) -> None:
    """A small table of a results dict's metrics (fractions shown as they are)."""
    skip = ("task", "split", "runs", "seeds", "step", "mode")
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


def run_finetune(args: argparse.Namespace) -> None:
    """Merge defaults < config file < flags, run, print the dev results."""
    from .recipes.finetune import FinetuneConfig, run_finetuning

    values, flags = file_and_flag_settings(FinetuneConfig, args)
    config = FinetuneConfig(**{**values, **flags})
    results = run_finetuning(config)
    print_results(results)
    print(f"wrote the best model, eval_results.json and learning_curve.png to {config.out}")


def add_distill(commands: argparse._SubParsersAction) -> None:
    """`bertology distill`: train a small student on a fine-tuned teacher's soft targets."""
    p = commands.add_parser(
        "distill", help="distil a fine-tuned teacher into a small, fast student",
        description="The teacher labels a transfer set (the task's training text and any --unlabeled files; its "
        "outputs are cached and reused by later runs) and a student learns its soft targets. Writes the best "
        "student (by the task's main dev metric), eval_results.json (with the teacher's score), metrics.jsonl "
        "and learning_curve.png into --out. Every flag can also be a key of a --config file (TOML or JSON).",
    )
    S = argparse.SUPPRESS
    data = p.add_argument_group("teacher, student and data")
    data.add_argument("--teacher", default=S, metavar="DIR", help="a fine-tuned model directory")
    data.add_argument("--student", default=S, metavar="DIR", help="a pre-trained encoder (default: random init)")
    data.add_argument("--preset", choices=list(PRESETS), default=S, help="the random-init student's size (mini)")
    data.add_argument("--data", default=S, metavar="PATH", help="the task's folder: dev scores the student, "
                      "train's texts join the transfer set")
    data.add_argument("--train-file", default=S, help="your own task: training CSV/TSV/JSONL")
    data.add_argument("--dev-file", default=S, help="your own task: dev CSV/TSV/JSONL")
    data.add_argument("--unlabeled", nargs="+", default=S, metavar="FILE",
                      help="more transfer text: one example per line (a tab between the texts of a pair)")
    data.add_argument("--no-train-text", dest="train_text", action="store_false", default=S,
                      help="leave the task's training text out of the transfer set")
    data.add_argument("--max-transfer-examples", type=positive_int, default=S, help="a reproducible random subset")
    data.add_argument("--augment", type=int, default=S, metavar="N",
                      help="add N noisy copies of each transfer example (Tang et al. 2019: words masked or "
                           "replaced, n-grams sampled) for the teacher to label (0)")
    data.add_argument("--max-seq-len", type=positive_int, default=S, help="tokens per row (the teacher's)")
    data.add_argument("--out", default=S, metavar="DIR", help="output directory")
    data.add_argument("--cache-dir", default=S, help="where the teacher's targets are kept ($BERTOLOGY_CACHE)")
    loss = p.add_argument_group("loss")
    loss.add_argument("--loss", choices=["kl", "mse"], default=S, help="KL between softened distributions (kl) "
                      "or MSE between logits")
    loss.add_argument("--temperature", type=float, default=S, help="softening temperature for kl (2)")
    loss.add_argument("--label-weight", type=float, default=S, help="weight of the true labels' loss (0)")
    loss.add_argument("--hidden-weight", type=float, default=S, help="weight of the hidden-state loss (0 = off)")
    add_epoch_loop_flags(p, "passes over the transfer set", lr=1e-4)
    p.set_defaults(run=run_distill)


def run_distill(args: argparse.Namespace) -> None:
    """Merge defaults < config file < flags, run, print the student's dev results."""
    from .recipes.distill import DistillConfig, run_distillation

    values, flags = file_and_flag_settings(DistillConfig, args)
    config = DistillConfig(**{**values, **flags})
    results = run_distillation(config)
    if "split" in results:
        print_results(results)
    print(f"wrote the student, eval_results.json and learning_curve.png to {config.out}")


def add_evaluate(commands: argparse._SubParsersAction) -> None:
    """`bertology evaluate`: a fine-tuned model's metrics on a task's split."""
    p = commands.add_parser("evaluate", help="score a fine-tuned model on a task's dev (or other) split")
    p.add_argument("--task", help="the task (default: the one the model was fine-tuned on)")
    p.add_argument("--data", required=True, metavar="PATH", help="the task's folder or file")
    p.add_argument("--model", required=True, metavar="DIR", help="a model directory from `bertology finetune`")
    p.add_argument("--split", default="dev", help="dev (default), dev_mismatched, train or test")
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    p.add_argument("--out", type=Path, help="also write the results as JSON here")
    p.set_defaults(run=run_evaluate)


def run_evaluate(args: argparse.Namespace) -> None:
    """Score and print; write JSON when asked."""
    from .files import write_json_atomic
    from .recipes.finetune import run_evaluation

    results = run_evaluation(args.task, args.data, str(args.model), args.split, args.batch_size, args.precision)
    print_results(results)
    if args.out:
        write_json_atomic(args.out, results)


def add_predict(commands: argparse._SubParsersAction) -> None:
    """`bertology predict`: run a fine-tuned model over a file."""
    p = commands.add_parser(
        "predict", help="predict with a fine-tuned model: GLUE submission TSV, SQuAD predictions JSON, CoNLL tags",
        description="Input formats: the task's official format (GLUE test.tsv, SQuAD JSON, CoNLL file), or for "
        "sentence tasks a .txt with one text per line (a tab between the two texts of a pair) and for tagging a "
        ".txt with one sentence of space-separated words per line. Output: GLUE-style index<TAB>prediction TSV, "
        "{id: answer} JSON, or CoNLL columns (word [gold] predicted).",
    )
    p.add_argument("--model", required=True, metavar="DIR", help="a model directory from `bertology finetune`")
    p.add_argument("--input", required=True, type=Path, metavar="FILE")
    p.add_argument("--out", required=True, type=Path, metavar="FILE")
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    p.set_defaults(run=run_predict)


def run_predict(args: argparse.Namespace) -> None:
    """Predict and write the file."""
    from .recipes.finetune import run_prediction

    count = run_prediction(str(args.model), args.input, args.out, args.batch_size, args.precision)
    print(f"wrote {count:,} predictions to {args.out}")


def add_export(commands: argparse._SubParsersAction) -> None:
    """`bertology export`: a model directory as a transformers copy, PyTorch int8, or ONNX."""
    p = commands.add_parser(
        "export", help="export a model for deployment: transformers copy (hf), PyTorch int8, or ONNX",
        description="hf: config.json + model.safetensors + tokenizer that transformers loads as it is. int8: "
        "dynamic int8 quantization of every linear layer (smaller, faster on the CPU). onnx: model.onnx for ONNX "
        "Runtime, dynamic batch and sequence length. `bertology evaluate` and `predict` run every export.",
    )
    p.add_argument("--model", required=True, type=Path, metavar="DIR", help="a fine-tuned model or encoder directory")
    p.add_argument("--format", required=True, dest="fmt", metavar="FORMAT", help="hf, int8 or onnx")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="output directory (new or empty)")
    p.add_argument("--force", action="store_true", help="replace a non-empty output directory")
    p.set_defaults(run=run_export)


def run_export(args: argparse.Namespace) -> None:
    """Export and report the size on disk."""
    from .uses.export import export_model

    out = export_model(args.model, args.fmt, args.out, force=args.force)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    print(f"wrote the {args.fmt} export of {args.model} to {out} ({size / 2**20:.1f} MiB)")


def add_demo(commands: argparse._SubParsersAction) -> None:
    """`bertology demo`: the main job, offline, in minutes."""
    p = commands.add_parser(
        "demo", help="the whole story offline in minutes: vocabulary, pre-training, fine-tuning vs from scratch",
        description="Pre-train a tiny BERT on the Python standard library's own documentation, fine-tune it to tell "
        "which part of the library a docstring comes from, and compare with the same model trained from scratch. "
        "Writes results.json and PNGs into --out.",
    )
    p.add_argument("--out", default="bertology-demo", help="output directory (bertology-demo)")
    p.add_argument("--pretrain-time", default="4m", help="pre-training budget, e.g. 90s, 4m (4m)")
    p.add_argument("--preset", choices=list(PRESETS), default="tiny", help="model size (tiny)")
    p.add_argument("--objective", choices=list(OBJECTIVES), default="roberta", help="pre-training objective (roberta)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    p.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> None:
    """Run the demo."""
    from .recipes.demo import DemoConfig
    from .recipes.demo import run_demo as demo

    demo(DemoConfig(out=args.out, pretrain_time=args.pretrain_time, preset=args.preset, objective=args.objective,
                    seed=args.seed, progress=args.progress))


def add_explain(commands: argparse._SubParsersAction) -> None:
    """`bertology explain`: pictures of what an encoder does inside."""
    explain = commands.add_parser("explain", help="draw attention maps, or a word's contextual vs static vectors")
    actions = explain.add_subparsers(dest="action", metavar="ACTION", required=True)
    attention = actions.add_parser(
        "attention", help="heatmaps of the attention weights of one head, one layer's heads, or all",
        description="Draw attention weights with the WordPiece tokens ([CLS] and [SEP] included) on both axes: "
        "row = the token attending, column = the token attended to. Layers are numbered 1..L, heads 1..heads.",
    )
    attention.add_argument("--model", required=True, type=Path, metavar="DIR",
                           help="any model directory (pre-trained, fine-tuned, transformers BERT)")
    attention.add_argument("--text", required=True, help="the text (text A)")
    attention.add_argument("--text-pair", help="a second text (text B), as in sentence-pair tasks")
    attention.add_argument("--layer", default="last", help="a layer number, -1 or last (default), or all")
    attention.add_argument("--head", default="all", help="a head number, or all (default): a grid of the heads")
    attention.add_argument("--model-name", help="the name in the title (default: the directory's name)")
    attention.add_argument("--out", required=True, type=Path, metavar="FILE.png")
    attention.set_defaults(run=run_explain_attention)
    senses = actions.add_parser(
        "senses", help="an ambiguous word's contextual vectors by sense, beside its one static vector",
        description="Embed a word in sentences that use it in different senses, project its contextual vectors "
        "(mean of its WordPieces at --layer) to 2-D with PCA, and draw them beside the static view: its input "
        "embedding, the same vector in every sentence. Prints the mean cosine similarity within vs across senses.",
    )
    senses.add_argument("--model", required=True, type=Path, metavar="DIR",
                        help="any model directory (pre-trained, fine-tuned, transformers BERT)")
    senses.add_argument("--word", required=True, help="the ambiguous word (built-in sentences for: bank)")
    senses.add_argument("--sentences", type=Path, metavar="FILE",
                        help="your own sentences: one 'sense<TAB>sentence' per line, two senses with two sentences "
                             "each at least")
    senses.add_argument("--layer", default="last",
                        help="0 (embeddings output) .. L, -1 or last (default), or sum_last_four and the like")
    senses.add_argument("--model-name", help="the name in the title (default: the directory's name)")
    senses.add_argument("--out", required=True, type=Path, metavar="FILE.png")
    senses.set_defaults(run=run_explain_senses)


def run_explain_attention(args: argparse.Namespace) -> None:
    """Draw the attention maps."""
    from .uses.explain import explain_attention

    path = explain_attention(args.model, args.text, args.out, args.text_pair, args.layer, args.head, args.model_name)
    print(f"wrote {path}")


def run_explain_senses(args: argparse.Namespace) -> None:
    """Draw the word's vectors and print how well they separate by sense."""
    from .uses.explain import explain_senses

    report = explain_senses(args.model, args.word, args.out, args.sentences, args.layer, args.model_name)
    print(report.summary())
    print(f"wrote {args.out}")


def add_embed(commands: argparse._SubParsersAction) -> None:
    """`bertology embed`: sentence or word vectors of every line of a file."""
    p = commands.add_parser(
        "embed", help="sentence or word vectors from any BERT model, written to .npy or .jsonl",
        description="Embed every line of a text file (or one field of each JSONL object) with any model directory "
        "(pre-trained, fine-tuned: the head is dropped, transformers or sentence-transformers BERT). --out ending in "
        ".npy writes one (lines, width) float32 array for sentences; for tokens, all word vectors stacked plus "
        "an index (vectors.npy -> vectors.index.jsonl) with each line's rows and words. --out ending in .jsonl "
        "writes one object per line. Blank lines stop with an error (row i is line i) unless --skip-empty.",
    )
    p.add_argument("--model", required=True, metavar="DIR", help="any model directory")
    p.add_argument("--input", required=True, metavar="FILE", help="one text per line, or JSONL (see --field)")
    p.add_argument("--out", required=True, metavar="FILE", help="FILE.npy or FILE.jsonl")
    p.add_argument("--layers", default="last",
                   help="last (default), second_to_last, sum_last_four, concat_last_four, sum_all, embeddings, "
                        "or layer numbers like 4,5,6 (summed; 0 = embeddings, -1 = last)")
    p.add_argument("--pooling", choices=["mean", "cls", "max"], default="mean",
                   help="sentence vectors: mean (default) or max over the tokens, or the [CLS] vector")
    p.add_argument("--normalize", action="store_true", help="scale each vector to unit length")
    p.add_argument("--level", choices=["sentence", "token"], default="sentence",
                   help="one vector per line (default) or per word")
    p.add_argument("--word-pieces", choices=["first", "mean", "none"], default="first",
                   help="token level: a word's first WordPiece (default), the mean of its pieces, or every piece")
    p.add_argument("--field", help="JSONL input: the field holding the text (default for .jsonl: text)")
    p.add_argument("--skip-empty", action="store_true", help="leave out blank lines (default: stop at the first)")
    p.add_argument("--batch-size", type=positive_int, default=64, help="texts per forward pass (64)")
    p.add_argument("--max-seq-len", type=positive_int,
                   help="tokens per text; longer ones are cut and counted (default: the model's limit)")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto", help="auto: bf16 where fast")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.set_defaults(run=run_embed)


def run_embed(args: argparse.Namespace) -> None:
    """Embed the file and print a one-line summary."""
    from .uses.embed import EmbedConfig
    from .uses.embed import run_embed as embed

    summary = embed(EmbedConfig(
        model=args.model, input=args.input, out=args.out, layers=args.layers, pooling=args.pooling,
        normalize=args.normalize, level=args.level, word_pieces=args.word_pieces, field=args.field,
        skip_empty=args.skip_empty, batch_size=args.batch_size, max_seq_len=args.max_seq_len,
        precision=args.precision, progress=args.progress,
    ))
    counts = {"truncated": "truncated", "skipped_empty": "blank skipped", "dropped_words": "words without a vector"}
    notes = [f"{summary[key]:,} {what}" for key, what in counts.items() if summary[key]]
    rows, width = summary["shape"]
    print(f"embedded {summary['lines']:,} lines -> {rows:,} x {width} vectors in {summary['path']}"
          + (f" (+ {summary['index']})" if "index" in summary else "")
          + f", {summary['seconds']:.1f} s" + (f"; {', '.join(notes)}" if notes else ""))


def add_serve(commands: argparse._SubParsersAction) -> None:
    """`bertology serve`: a model directory as an HTTP JSON API."""
    p = commands.add_parser(
        "serve", help="serve a model over HTTP: POST /predict and /embed, GET /health and /info, docs at /docs",
        description="Serve a fine-tuned model (POST /predict: labels with probabilities, scores, tags or answer spans) "
        "or any encoder (POST /embed: sentence vectors) as a JSON API. Concurrent requests are micro-batched. "
        "SIGINT/SIGTERM finish the requests in flight, then exit.",
    )
    p.add_argument("--model", required=True, metavar="DIR", help="a model directory (fine-tuned, or a bare encoder)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=int, default=8000, help="port (8000; 0 picks a free one)")
    p.add_argument("--max-batch", type=positive_int, default=64, help="texts per forward pass (64; 1 = no batching)")
    p.add_argument("--max-wait-ms", type=float, default=5.0, help="how long a batch waits for more texts (5)")
    p.add_argument("--max-queue", type=positive_int, default=1024, help="texts waiting; beyond, 503 (1024)")
    p.add_argument("--max-texts", type=positive_int, default=64, help="texts per request (64)")
    p.add_argument("--max-text-chars", type=positive_int, default=10_000, help="characters per text (10000)")
    p.add_argument("--max-body-bytes", type=positive_int, default=1_000_000, help="request body size (1000000)")
    p.add_argument("--threads", type=positive_int, help="PyTorch threads (default: PyTorch's choice)")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto", help="auto: bf16 where fast")
    p.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> None:
    """Serve until SIGINT or SIGTERM."""
    from .uses.serve import ServeConfig, run_server

    run_server(ServeConfig(**{k: v for k, v in vars(args).items() if k not in ("run", "command")}))


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (all subcommands)."""
    parser = ArgumentParser(
        prog="bertology",
        description="BERT end to end: WordPiece vocabularies, pre-training, fine-tuning, features, export, serving.",
    )
    parser.add_argument("--version", action="version", version=f"bertology {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in (add_demo, add_tokenizer, add_info, add_pretrain, add_finetune, add_evaluate, add_predict,
                add_distill, add_explain, add_embed, add_serve, add_export):
        add(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `bertology` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except UserError as err:
        print(f"bertology: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bertology: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
