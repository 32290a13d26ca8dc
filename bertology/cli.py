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


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (all subcommands)."""
    parser = ArgumentParser(
        prog="bertology",
        description="BERT end to end: WordPiece vocabularies, pre-training, fine-tuning, features, export, serving.",
    )
    parser.add_argument("--version", action="version", version=f"bertology {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in (add_tokenizer, add_info):
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
