"""Distillation on SST-2: does a small student taught by a fine-tuned teacher beat the same
student fine-tuned on the 67k labels, keep >= 95% of the teacher's accuracy and run >= 3x faster?

Teacher: a fine-tuned SST-2 model (e.g. all-MiniLM-L6-v2 after `bertology finetune --task sst2`).
Student: preset mini (4 layers, 256 wide), either a `bertology pretrain` output (--student DIR)
or randomly initialised with the teacher's vocabulary (--student random). The transfer set is
SST-2's training sentences without their labels, plus --book-sentences sentences from the
Gutenberg books in ../shared/data, plus --augment noisy copies of each (Tang et al. 2019).
The baseline fine-tunes the same student on the labels.
Inference speed: teacher and student over SST-2 dev at batch 32, in the same run.

    python bench/distill.py --teacher runs/teacher-sst2 --student runs/student-mini-pt [--book-sentences 100000] [--augment 4]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data"))
from results_page import slug, write_section  # noqa: E402
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'“‘])")


def book_sentences(folder: Path, count: int, seed: int) -> list[str]:
    """`count` sentences of 6-40 words drawn at random from the books' text (PG header and licence left out)."""
    sentences = []
    for path in sorted(folder.glob("*.txt")):
        text = path.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
        start, end = text.find("*** START OF"), text.find("*** END OF")
        body = text[text.find("\n", start) + 1: end if end > 0 else None]
        for paragraph in re.split(r"\n\s*\n", body):
            for sentence in SENTENCE_END.split(" ".join(paragraph.split())):
                if 6 <= len(sentence.split()) <= 40 and "\t" not in sentence:
                    sentences.append(sentence)
    random.Random(seed).shuffle(sentences)
    return sentences[:count]


def random_student(teacher: str, out: Path) -> str:
    """A randomly initialised mini encoder with the teacher's vocabulary, saved as a model directory."""
    import torch

    from bertology import BertConfig, BertModel, Tokenizer

    torch.manual_seed(0)
    config = BertConfig.load(teacher)
    BertModel(BertConfig.from_preset("mini", vocab_size=config.vocab_size)).save_pretrained(out)
    Tokenizer.from_pretrained(teacher).save_pretrained(out)
    return str(out)


def sentences_per_second(model_dirs: dict[str, str], texts: list[str], precision: str,
                         rounds: int = 10) -> dict[str, tuple[float, float]]:
    """Inference throughput of each model over `texts` at batch 32: (forward passes over the
    pre-tokenized texts, end to end with tokenization and decoding), the median of `rounds`
    rounds after two warm-up passes. The models take turns within every round, so a change in
    the machine's speed (other processes, clock) hits them alike."""
    from bertology.inference.runners import load_finetuned
    from bertology.inference.predict import predict, run_rows
    from bertology.tasks.inputs import encode
    from bertology.tasks.readers import SequenceExample

    examples = [SequenceExample(str(i), t, None, None, f"dev:{i}") for i, t in enumerate(texts)]
    jobs = {}
    for name, directory in model_dirs.items():
        model, tokenizer, spec, settings = load_finetuned(directory)
        encoded = encode(spec, examples, tokenizer, settings, training=False)
        jobs[name, "model"] = partial(run_rows, model, encoded, spec, tokenizer.pad_token_id, 32, precision)
        jobs[name, "end to end"] = partial(predict, model, tokenizer, spec, examples, settings, 32, precision)
    for job in [*jobs.values(), *jobs.values()]:
        job()
    seconds = {key: [] for key in jobs}
    for _ in range(rounds):
        for key, job in jobs.items():
            start = time.perf_counter()
            job()
            seconds[key].append(time.perf_counter() - start)
    return {name: tuple(len(texts) / statistics.median(seconds[name, what]) for what in ("model", "end to end"))
            for name in model_dirs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--teacher", required=True, help="a fine-tuned SST-2 model directory")
    parser.add_argument("--student", default="random", help="a pre-trained mini encoder directory, or 'random'")
    parser.add_argument("--book-sentences", type=int, default=100_000)
    parser.add_argument("--augment", type=int, default=0, help="noisy copies of each transfer text (Tang et al.)")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--finetune-epochs", type=float, default=3.0)
    parser.add_argument("--finetune-lr", type=float, default=1e-4)
    parser.add_argument("--skip", nargs="*", default=[], choices=["finetune", "distill"])
    parser.add_argument("--out", default=None, help="keep the students here (default: a temporary folder)")
    args = parser.parse_args()

    from bertology.recipes.distill import DistillConfig, run_distillation
    from bertology.recipes.finetune import FinetuneConfig, run_finetuning
    from bertology.tasks.readers import TASKS, read_glue

    sst2 = DATA / "glue" / "SST-2"
    work = Path(args.out or tempfile.mkdtemp(prefix="bertology-distill-"))
    work.mkdir(parents=True, exist_ok=True)
    student = random_student(args.teacher, work / "random-mini") if args.student == "random" else args.student
    rows = {}
    if "finetune" not in args.skip:
        start = time.perf_counter()
        results = run_finetuning(FinetuneConfig(task="sst2", data=str(sst2), model=student, out=str(work / "finetuned"),
                                                epochs=args.finetune_epochs, lr=args.finetune_lr, progress=False))
        rows["student fine-tuned on the 67k labels"] = (results["accuracy"], time.perf_counter() - start)
    if "distill" not in args.skip:
        unlabeled = []
        if args.book_sentences:
            books = work / "book_sentences.txt"
            books.write_text("\n".join(book_sentences(DATA / "gutenberg", args.book_sentences, seed=0)) + "\n",
                             encoding="utf-8")
            unlabeled.append(str(books))
        start = time.perf_counter()
        results = run_distillation(DistillConfig(teacher=args.teacher, student=student, data=str(sst2),
                                                 unlabeled=unlabeled, augment=args.augment, out=str(work / "distilled"),
                                                 epochs=args.epochs, lr=args.lr, progress=False))
        transfer = json.loads((work / "distilled" / "distill_config.json").read_text())["transfer_examples"]
        name = (f"student distilled: {transfer:,} unlabeled texts (SST-2 train"
                + (f" + {args.book_sentences:,} book sentences" if args.book_sentences else "")
                + (f", and up to {args.augment} noisy copies of each" if args.augment else "") + ")")
        rows[name] = (results["accuracy"], time.perf_counter() - start)
        teacher_accuracy = results["teacher_accuracy"]
    dev = [e.text_a for e in read_glue(TASKS["sst2"], sst2 / "dev.tsv", "dev")]
    student_dir = work / "distilled" if (work / "distilled" / "eval_results.json").is_file() else work / "finetuned"
    speeds = sentences_per_second({"teacher": args.teacher, "student": str(student_dir)}, dev, "auto")

    lines = [f"SST-2 dev ({len(dev)} sentences); teacher {args.teacher}; student init: {args.student}; lr {args.lr:g}, "
             "batch 32", "", "| model | dev accuracy | % of teacher | training time |", "|---|---:|---:|---:|"]
    if "distill" in args.skip:  # the teacher's own dev score, as fine-tuning recorded it
        teacher_accuracy = json.loads((Path(args.teacher) / "eval_results.json").read_text())["accuracy"]
    lines.append(f"| teacher ({Path(args.teacher).name}) | {teacher_accuracy:.4f} | 100.0% | |")
    for name, (accuracy, seconds) in rows.items():
        lines.append(f"| {name} | {accuracy:.4f} | {100 * accuracy / teacher_accuracy:.1f}% | {seconds / 60:.1f} min |")
    lines += ["", f"Inference at batch 32 ({student_dir.name} student; median of 10 interleaved rounds):", ""]
    for n, what in enumerate(("model forward passes (pre-tokenized)", "end to end (tokenization included)")):
        teacher, student = speeds["teacher"][n], speeds["student"][n]
        lines.append(f"- {what}: teacher {teacher:,.0f} sentences/s, student {student:,.0f} sentences/s "
                     f"({student / teacher:.2f}x)")
    print("\n" + "\n".join(lines))
    write_section("distill", slug("sst2", Path(args.student).name, "books", args.book_sentences, "augment", args.augment),
                  f"A student ({args.student}) taught by {Path(args.teacher).name} on SST-2", "\n".join(lines))
    (work / "bench_results.json").write_text(json.dumps(
        {"rows": rows, "teacher_accuracy": teacher_accuracy, "speeds": speeds, "args": vars(args)}, indent=2))
    print(f"students and results in {work}")


if __name__ == "__main__":
    main()
