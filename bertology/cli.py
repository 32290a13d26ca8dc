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
from .config import OBJECTIVES, PRESETS
from .errors import UserError


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
    from .tokenizer import train_tokenizer

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
    from .model import load_model

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


MODEL_FLAGS = {"pre_layer_norm": "pre_layer_norm", "embedding_size": "embedding_size",
               "share_layers": "share_layers", "no_segment_embeddings": "type_vocab_size"}


def run_pretrain(args: argparse.Namespace) -> None:
    """Merge defaults < config file < flags, then run."""
    from .pretrain import PretrainConfig, run_pretraining

    values = PretrainConfig.read_settings(args.config) if args.config else {}
    flags = {k: v for k, v in vars(args).items() if k not in ("run", "command", "config")}
    model = dict(values.get("model", {}))
    for flag, field_name in MODEL_FLAGS.items():
        if flag in flags:
            value = flags.pop(flag)
            model[field_name] = 0 if flag == "no_segment_embeddings" else value
    status = run_pretraining(PretrainConfig(**{**values, **flags, "model": model}))
    if status == "interrupted":
        raise SystemExit(130)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (all subcommands)."""
    parser = ArgumentParser(
        prog="bertology",
        description="BERT end to end: WordPiece vocabularies, pre-training, fine-tuning, features, export, serving.",
    )
    parser.add_argument("--version", action="version", version=f"bertology {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in (add_tokenizer, add_info, add_pretrain):
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
