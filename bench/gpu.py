"""bertology on one GPU, against transformers in the same run: every table of issue 36.

Sections, in this order (each one's table is written to the results page as soon as it is done,
so a run cut short still leaves what it measured):

1. peak: the bf16 matrix-product rate of this card (8192^3), the denominator of every MFU;
2. pretrain_step: one optimizer step of BERT pre-training (MLM + NSP, bf16 autocast, fused AdamW,
   clipping at 1.0) at mini / base / large, seq 128, batch 128: tokens/s of bertology's Trainer and
   of a plain transformers loop on the same batches, the ratio, and bertology's MFU;
3. profile: where a bertology pre-training step's time goes, at mini and base: the share of the
   step's wall time the device is busy (low: launch-bound) and the kernels that take the most of it
   (torch.profiler; on the CPU, the operators);
4. inference: BertModel base at batch 256 x 128 in fp32 and bf16, sequences/s of both libraries;
5. embed: mean-pooled sentence vectors of WikiText-2 lines (mixed lengths) at bf16: bertology's
   `embed_texts` (length-bucketed batches) against transformers' AutoModel padding to the longest;
6. generation: GPT-2 124M shape (random weights), greedy, 128 new tokens after 16, batch 1 / 8 / 32:
   new tokens/s of transformers' `generate` and of bertology's over its static key/value cache, eager
   and with the decode step compiled (CUDA graphs), the ids checked identical;
7. pretrain_cli: `bertology pretrain --preset base --batch-size 128 --precision bf16` end to end on
   WikiText-2 (a child process): its steady tokens/s against the bare step of the same model (its
   trained vocabulary's size) on batches already on the device;
8. families: every family and objective `pretrain` trains, on this device: pre-train (60 steps,
   checkpoints included), --resume (loads the checkpoint on the device), reload the saved model on
   the device and on the CPU (features compared), then `embed` or `generate` as the family has
   them, and finetune + evaluate on SST-2 where the family has a sequence head; pass or the error;
9. compile: base pre-training steps eager and compiled (`--compile`: torch.compile, inductor), 300
   steps each: the repeated blocks compiled from cold caches and again from warm ones, and the whole
   step as one graph; the compile time, the steady step time, and the total.

    python bench/gpu.py                  # on a CUDA machine: about 8 minutes on one H100
    python bench/gpu.py --smoke          # tiny sizes on any device (the CPU too): checks that it runs
    python bench/gpu.py --only peak pretrain_step generation

It writes docs/results/gpu.md (--results) through results_page.py, a section at a time, each
stamped with the date, machine, torch and commit, and naming the device, driver, CUDA and
transformers. Data: WikiText-2 from $BERTOLOGY_DATA (or --corpus), SST-2 from
$BERTOLOGY_DATA/glue/SST-2; a section whose data is absent says so and the others run.
--budget stops starting sections once that many seconds have passed (the compile section takes
what is left, up to its own cap).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's bertology, wherever the script is started from

import torch  # noqa: E402
import transformers  # noqa: E402
from pretrain_throughput import MASK_ID, make_batches, model_flops_per_token  # noqa: E402
from results_page import RESULTS, write_section  # noqa: E402

from bertology import BertConfig, BertModel  # noqa: E402
from bertology.training.loop import TrainConfig, Trainer  # noqa: E402
from bertology.training.objectives import build_objective  # noqa: E402


@dataclass
class Sizes:
    """What each section runs: the issue's sizes, or tiny ones for --smoke."""

    presets: tuple[str, ...] = ("mini", "base", "large")
    batch: int = 128
    seq_len: int = 128
    warmup_steps: int = 3
    timed_steps: int = 10
    matmul: int = 8192
    infer_batch: int = 256
    embed_lines: int = 8192
    embed_batch: int = 256
    gpt_preset: str = "base"
    gpt_vocab: int = 50257
    gpt_positions: int = 1024
    new_tokens: int = 128
    gen_batches: tuple[int, ...] = (1, 8, 32)
    repeats: int = 3
    cli_preset: str = "base"
    cli_steps: int = 200
    family_preset: str = "tiny"
    family_steps: int = 60
    family_seq_len: int = 64
    family_batch: int = 32
    family_vocab: int = 8000
    finetune_examples: int = 512
    compile_preset: str = "base"
    compile_steps: int = 300
    compile_cap: float = 240.0  # seconds the compiled run may take, its compilation included


SMOKE = Sizes(presets=("tiny",), batch=4, seq_len=32, warmup_steps=1, timed_steps=2, matmul=256, infer_batch=4,
              embed_lines=64, embed_batch=16, gpt_preset="tiny", gpt_vocab=1000, gpt_positions=64, new_tokens=4,
              gen_batches=(1, 2), repeats=1, cli_preset="tiny", cli_steps=4, family_steps=4, family_seq_len=32,
              family_batch=4, family_vocab=500, finetune_examples=32, compile_preset="tiny", compile_steps=3,
              compile_cap=300.0)


class Bench:
    """The run's state: device, sizes, the card's peak, the bare step's speed, a scratch folder."""

    def __init__(self, args: argparse.Namespace):
        self.sizes = SMOKE if args.smoke else Sizes()
        self.smoke = args.smoke
        self.device = torch.device(args.device if args.device != "auto" else
                                   ("cuda" if torch.cuda.is_available() else "cpu"))
        self.cuda = self.device.type == "cuda"
        self.start = time.perf_counter()
        self.budget = args.budget
        self.scratch = Path(tempfile.mkdtemp(prefix="bertology-gpu-"))
        self.corpus = corpus_files(args.corpus)
        self.peak: float | None = None
        self.families = args.families

    def log(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.start:6.1f} s] {message}", flush=True)

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.start)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def free(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def bf16(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16)


def corpus_files(given: list[str] | None) -> list[Path]:
    """WikiText-2's files (given, or from $BERTOLOGY_DATA), else none."""
    if given:
        return [Path(p) for p in given]
    root = Path(os.environ.get("BERTOLOGY_DATA", REPO / "shared" / "data")) / "wikitext-2-raw"
    return sorted(root.glob("wiki.*.raw")) if root.is_dir() else []


def sst2_folder() -> Path | None:
    folder = Path(os.environ.get("BERTOLOGY_DATA", REPO / "shared" / "data")) / "glue" / "SST-2"
    return folder if (folder / "train.tsv").is_file() else None


def median_seconds(bench: Bench, run, repeats: int) -> float:
    """Median wall time of `run()` over `repeats` calls, the device synchronised around each."""
    times = []
    for _ in range(repeats):
        bench.sync()
        start = time.perf_counter()
        run()
        bench.sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ----- 1. the card's peak ----------------------------------------------------------------------


def section_peak(bench: Bench) -> list[str]:
    n = bench.sizes.matmul
    a = torch.randn(n, n, device=bench.device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=bench.device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    seconds = median_seconds(bench, lambda: [a @ b for _ in range(10)], 3) / 10
    bench.peak = 2 * n**3 / seconds
    return [f"bf16 matrix product {n}^3 on random data: **{bench.peak / 1e12:,.1f} TFLOP/s** (median of 3 x 10; "
            "the denominator of every MFU below)"]


# ----- 2. the pre-training step ----------------------------------------------------------------


def transformers_step(bench: Bench, config: BertConfig):
    """A plain transformers training step on the same work: BertForPreTraining, bf16 autocast, fused
    AdamW, clipping at 1.0 -> step(batch)."""
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(**{k: v for k, v in config.to_dict().items() if k != "model_type"})
    model = transformers.BertForPreTraining(hf_config).to(bench.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, fused=bench.cuda or None)

    def step(batch):
        with bench.bf16():
            loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         token_type_ids=batch["token_type_ids"], labels=batch["labels"],
                         next_sentence_label=batch["pair_labels"]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def bertology_trainer(bench: Bench, config: BertConfig, batches, compile_scope: str | None = None) -> Trainer:
    """bertology's Trainer on the BERT objective (bf16, its fused AdamW, clipping at 1.0), fed `batches` in
    turn; compiled when given a `compile_scope` (--compile-scope)."""
    torch.manual_seed(0)
    objective = build_objective("bert", config, MASK_ID)
    settings = TrainConfig(lr=1e-4, max_steps=10**6, precision="bf16", device=str(bench.device), progress=False,
                           compile=compile_scope is not None, compile_scope=compile_scope or "blocks",
                           max_grad_norm=1.0)
    return Trainer(objective, settings, bench.scratch / "trainer", lambda step: [batches[step % len(batches)]])


def cycling(step, batches):
    """step(batch) -> a call taking no argument that feeds `batches` in turn, as the Trainer is fed."""
    count = iter(range(10**12))
    return lambda: step(batches[next(count) % len(batches)])


def tokens_per_second(bench: Bench, step, tokens: int) -> float:
    s = bench.sizes
    for _ in range(s.warmup_steps):
        step()
    return tokens / (median_seconds(bench, lambda: [step() for _ in range(s.timed_steps)], 1) / s.timed_steps)


def section_pretrain_step(bench: Bench) -> list[str]:
    s = bench.sizes
    batches = [{k: v.to(bench.device) for k, v in b.items()} for b in make_batches(4, 0, s.batch, s.seq_len)]
    tokens = s.batch * s.seq_len
    lines = [f"seq {s.seq_len}, batch {s.batch}, bf16 autocast, fused AdamW, clipping at 1.0; the same random "
             "batches for both (15% masked, NSP labels)", "",
             "| preset | transformers tok/s | bertology tok/s | ratio | bertology MFU | bertology peak memory |",
             "|---|---:|---:|---:|---:|---:|"]
    for preset in s.presets:
        config = BertConfig.from_preset(preset, vocab_size=30522, max_position_embeddings=max(512, s.seq_len))
        theirs = tokens_per_second(bench, cycling(transformers_step(bench, config), batches), tokens)
        bench.free()
        if bench.cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer = bertology_trainer(bench, config, batches)
        ours = tokens_per_second(bench, trainer.train_step, tokens)
        memory = f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if bench.cuda else "-"
        del trainer
        bench.free()
        mfu = ours * model_flops_per_token(config, seq_len=s.seq_len) / bench.peak if bench.peak else float("nan")
        lines.append(f"| {preset} | {theirs:,.0f} | {ours:,.0f} | {ours / theirs:.2f}x | {mfu:.0%} | {memory} |")
        bench.log(lines[-1])
    lines += ["", "Targets (issue 36): base >= 1.5x and >= 45% MFU, large >= 50% MFU, mini >= 1.2x."]
    return lines


# ----- profile ---------------------------------------------------------------------------------


def section_profile(bench: Bench) -> list[str]:
    """Where bertology's pre-training step spends its time: device-busy share and the top kernels."""
    s = bench.sizes
    presets = ("tiny",) if bench.smoke else ("mini", "base")
    batches = [{k: v.to(bench.device) for k, v in b.items()} for b in make_batches(4, 0, s.batch, s.seq_len)]
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if bench.cuda else [])
    key = "self_device_time_total" if bench.cuda else "self_cpu_time_total"
    steps = s.timed_steps
    lines = [f"bertology's pre-training step (MLM + NSP, bf16, fused AdamW, clipping), seq {s.seq_len}, batch "
             f"{s.batch}, {steps} steps under torch.profiler after {s.warmup_steps} unprofiled ones. Busy: the "
             f"{'kernels' if bench.cuda else 'operators'}' summed time over the steps' wall time (well below 100% on a "
             "GPU: the step waits on Python and kernel launches).", ""]
    for preset in presets:
        config = BertConfig.from_preset(preset, vocab_size=30522, max_position_embeddings=max(512, s.seq_len))
        trainer = bertology_trainer(bench, config, batches)
        for _ in range(s.warmup_steps):
            trainer.train_step()
        bench.sync()
        with torch.profiler.profile(activities=activities) as profile:
            start = time.perf_counter()
            for _ in range(steps):
                trainer.train_step()
            bench.sync()
            wall = time.perf_counter() - start
        del trainer
        bench.free()
        events = [e for e in profile.key_averages() if getattr(e, key) > 0]
        busy = sum(getattr(e, key) for e in events) / 1e6  # microseconds -> seconds
        lines += [f"**{preset}**: {1000 * wall / steps:.1f} ms per step, busy {busy / wall:.0%}", "",
                  "| kernel | calls per step | ms per step | share of busy time |", "|---|---:|---:|---:|"]
        for event in sorted(events, key=lambda e: getattr(e, key), reverse=True)[:12]:
            name = event.key if len(event.key) <= 70 else event.key[:67] + "..."
            lines.append(f"| `{name.replace('|', '/')}` | {event.count / steps:g} | "
                         f"{getattr(event, key) / 1000 / steps:.2f} | {getattr(event, key) / 1e6 / busy:.0%} |")
        lines.append("")
        bench.log(f"profile {preset}: {1000 * wall / steps:.1f} ms per step, busy {busy / wall:.0%}")
    return lines


# ----- 3. encoder inference --------------------------------------------------------------------


def saved_bert(bench: Bench, preset: str) -> Path:
    """A random BERT of `preset` saved once (both libraries load these weights)."""
    directory = bench.scratch / f"bert-{preset}"
    if not directory.is_dir():
        torch.manual_seed(0)
        BertModel(BertConfig.from_preset(preset, vocab_size=30522)).save_pretrained(directory)
    return directory


def section_inference(bench: Bench) -> list[str]:
    s = bench.sizes
    preset = "base" if not bench.smoke else "tiny"
    directory = saved_bert(bench, preset)
    ours = BertModel.from_pretrained(directory).to(bench.device).eval()
    theirs = transformers.BertModel.from_pretrained(directory).to(bench.device).eval()
    ids = torch.randint(1000, 30522, (s.infer_batch, s.seq_len), generator=torch.Generator().manual_seed(0))
    ids, mask = ids.to(bench.device), torch.ones_like(ids, device=bench.device)
    lines = [f"BertModel {preset} (random weights), batch {s.infer_batch} x {s.seq_len}, inference mode", "",
             "| precision | transformers seq/s | bertology seq/s | ratio | max abs difference |",
             "|---|---:|---:|---:|---:|"]
    for precision in ("fp32", "bf16"):
        context = bench.bf16 if precision == "bf16" else contextlib.nullcontext
        with torch.inference_mode(), context():
            outputs = [ours(ids, mask).last_hidden_state.float(), theirs(input_ids=ids, attention_mask=mask)
                       .last_hidden_state.float()]
            rates = [s.infer_batch / median_seconds(bench, lambda m=m: m(ids, mask), max(s.repeats, 3))
                     for m in (theirs, ours)]
        difference = (outputs[0] - outputs[1]).abs().max().item()
        lines.append(f"| {precision} | {rates[0]:,.0f} | {rates[1]:,.0f} | {rates[1] / rates[0]:.2f}x "
                     f"| {difference:.2g} |")
        bench.log(lines[-1])
    return lines


# ----- 4. embed on real text -------------------------------------------------------------------


def wikitext_lines(bench: Bench, count: int) -> list[str]:
    lines = []
    for path in bench.corpus:
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line and not line.startswith("="):
                lines.append(line)
    return lines[:count]


def section_embed(bench: Bench) -> list[str]:
    from bertology.data.tokenizer import train_tokenizer
    from bertology.inference.embedding import embed_texts, load_encoder

    s = bench.sizes
    texts = wikitext_lines(bench, s.embed_lines)
    if not texts:
        return ["skipped: no WikiText-2 (set $BERTOLOGY_DATA or --corpus)"]
    preset = "base" if not bench.smoke else "tiny"
    directory = bench.scratch / "bert-embed"
    tokenizer = train_tokenizer(bench.corpus, vocab_size=30522, out_dir=directory)
    torch.manual_seed(0)
    BertModel(BertConfig.from_preset(preset, vocab_size=tokenizer.vocab_size)).save_pretrained(directory)
    encoder, tokenizer = load_encoder(directory, bench.device)
    theirs = transformers.AutoModel.from_pretrained(directory).to(bench.device).eval()

    def transformers_embed():
        vectors = []
        for start in range(0, len(texts), s.embed_batch):
            batch = tokenizer(texts[start:start + s.embed_batch], padding=True, truncation=True, max_length=512,
                              return_tensors="pt")
            ids, mask = batch["input_ids"].to(bench.device), batch["attention_mask"].to(bench.device)
            with torch.inference_mode(), bench.bf16():
                states = theirs(input_ids=ids, attention_mask=mask).last_hidden_state.float()
            pooled = (states * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            vectors.append(pooled.cpu())
        return torch.cat(vectors)

    def bertology_embed():
        return torch.from_numpy(embed_texts(encoder, tokenizer, texts, batch_size=s.embed_batch, precision="bf16",
                                            max_seq_len=512))

    # As a server gets them: the batches in arrival order, padded to their longest, through the bare encoder;
    # bertology runs them on the real tokens alone (ops.Unpadding: variable-length FlashAttention).
    arrivals = [{k: v.to(bench.device) for k, v in tokenizer(texts[start:start + s.embed_batch], padding=True,
                                                           truncation=True, max_length=512, return_tensors="pt").items()
                 if k in ("input_ids", "attention_mask")} for start in range(0, len(texts), s.embed_batch)]

    def encode_arrivals(model):
        def run():
            with torch.inference_mode(), bench.bf16():
                for batch in arrivals:
                    model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return run

    reference, ours = transformers_embed(), bertology_embed()
    cosine = torch.nn.functional.cosine_similarity(reference, ours, dim=-1).min().item()
    rates = [len(texts) / median_seconds(bench, run, s.repeats) for run in (transformers_embed, bertology_embed)]
    bare = BertModel.from_pretrained(directory).to(bench.device).eval()
    served = [len(texts) / median_seconds(bench, encode_arrivals(model), s.repeats) for model in (theirs, bare)]
    lengths = [len(row) for row in tokenizer(texts, padding=False, truncation=False, return_tensors=None)["input_ids"]]
    padding = 1 - sum(lengths) / sum(b["attention_mask"].numel() for b in arrivals)
    return [f"{len(texts):,} WikiText-2 lines ({min(lengths)}-{max(lengths)} tokens, median "
            f"{statistics.median(lengths):.0f}), BERT {preset} (random weights), bf16, batches of {s.embed_batch}", "",
            "| what | transformers AutoModel (pad to longest) texts/s | bertology texts/s | ratio | min cosine |",
            "|---|---:|---:|---:|---:|",
            f"| embed, mean pooling (bertology: `embed_texts`, length-bucketed) | {rates[0]:,.0f} | {rates[1]:,.0f} "
            f"| {rates[1] / rates[0]:.2f}x | {cosine:.4f} |",
            f"| serve: the batches in arrival order ({padding:.0%} padding), the bare encoder | {served[0]:,.0f} "
            f"| {served[1]:,.0f} | {served[1] / served[0]:.2f}x | |",
            "", "Target (issue 36): >= 1.3x."]


# ----- 5. generation ---------------------------------------------------------------------------


def section_generation(bench: Bench) -> list[str]:
    from bertology.inference.generation import GenerationConfig, generate
    from bertology.models.gpt import GPTConfig, GPTLMHeadModel

    s = bench.sizes
    torch.manual_seed(0)
    config = GPTConfig.from_preset(s.gpt_preset, vocab_size=s.gpt_vocab, n_positions=s.gpt_positions,
                                   pre_layer_norm=True)
    directory = bench.scratch / "gpt"
    GPTLMHeadModel(config).save_pretrained(directory)
    ours = GPTLMHeadModel.from_pretrained(directory).to(bench.device).eval()
    theirs = transformers.GPT2LMHeadModel.from_pretrained(directory).to(bench.device).eval()
    # bertology's generate over its static cache, eagerly and with the decode step compiled (on a GPU
    # mode reduce-overhead: a CUDA graph replayed per token). inductor's C++ build takes minutes on a
    # small CPU: there the smoke run checks the compiled path with dynamo's aot_eager backend.
    torch._dynamo.reset()
    compile_backend = {} if bench.cuda else {"backend": "aot_eager"}
    contenders = {"eager": GenerationConfig(max_new_tokens=s.new_tokens),
                  "compiled": GenerationConfig(max_new_tokens=s.new_tokens, compile=True)}
    lines = [f"GPT-2 layout, {ours.num_parameters() / 1e6:,.0f}M parameters (random weights), fp32, greedy, "
             f"16-token prompts, {s.new_tokens} new tokens; bertology over its static key/value cache, eager and "
             "with `--compile` (its first call, which compiles and captures the decode step, timed apart)"
             + ("" if bench.cuda else " (CPU smoke run: backend aot_eager)"), "",
             "| batch | transformers new tok/s | bertology eager new tok/s | ratio | bertology compiled new tok/s "
             "| ratio | compiled first call | eager ids identical | compiled ids identical |",
             "|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    real_compile = torch.compile
    try:
        torch.compile = functools.partial(real_compile, **compile_backend)
        for batch in s.gen_batches:
            prompt = torch.randint(0, s.gpt_vocab, (batch, 16), generator=torch.Generator().manual_seed(1))
            prompt = prompt.to(bench.device)

            def run_theirs():
                return theirs.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=s.new_tokens,
                                       min_new_tokens=s.new_tokens, do_sample=False, pad_token_id=0)

            runs = {"transformers": run_theirs}
            runs.update({name: functools.partial(generate, ours, prompt, config=settings)
                         for name, settings in contenders.items()})
            with torch.inference_mode():
                outputs, first_call = {}, {}
                for name, run in runs.items():  # a warm-up each; the compiled one compiles here
                    bench.sync()
                    start = time.perf_counter()
                    outputs[name] = run().cpu()
                    first_call[name] = time.perf_counter() - start
                same = {name: torch.equal(outputs["transformers"], outputs[name]) for name in contenders}
                rates = {name: batch * s.new_tokens / median_seconds(bench, run, s.repeats) for name, run in runs.items()}
            ratio = {name: rates[name] / rates["transformers"] for name in contenders}
            lines.append(f"| {batch} | {rates['transformers']:,.0f} | {rates['eager']:,.0f} | {ratio['eager']:.2f}x | "
                         f"{rates['compiled']:,.0f} | {ratio['compiled']:.2f}x | {first_call['compiled']:.1f} s | "
                         f"{same['eager']} | {same['compiled']} |")
            bench.log(lines[-1])
    finally:
        torch.compile = real_compile
        torch._dynamo.reset()  # the compiled graphs and their CUDA graph pools go before the next section
    lines += ["", "Target (issue 36): >= 1.5x at batch 1 with identical ids."]
    return lines


# ----- 6. the CLI end to end -------------------------------------------------------------------


def section_pretrain_cli(bench: Bench) -> list[str]:
    s = bench.sizes
    if not bench.corpus:
        return ["skipped: no WikiText-2 (set $BERTOLOGY_DATA or --corpus)"]
    out = bench.scratch / "cli-run"
    argv = [sys.executable, "-m", "bertology", "pretrain", "--corpus", *map(str, bench.corpus), "--out", str(out),
            "--cache-dir", str(bench.scratch / "cache"), "--preset", s.cli_preset, "--batch-size", str(s.batch),
            "--max-seq-len", str(s.seq_len), "--precision", "bf16", "--device", str(bench.device),
            "--max-steps", str(s.cli_steps), "--log-every", str(max(s.cli_steps // 10, 1)), "--eval-every", "0",
            "--save-every", "0", "--no-progress"]
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - start
    if result.returncode != 0:
        return [f"FAILED (exit {result.returncode}): `{' '.join(argv[2:4])} ...`: "
                + (result.stderr.strip().splitlines() or ["no output"])[-1]]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [row for row in rows if "split" not in row][1:]  # the first window holds the first step's allocations
    rate = statistics.median(row["tokens_per_second"] for row in train) if train else float("nan")
    # The bare step of the very model the run trained (its trained vocabulary's size), on ready batches.
    config = BertConfig.load(out)
    batches = [{k: v.to(bench.device) for k, v in b.items()}
               for b in make_batches(4, 0, s.batch, s.seq_len, vocab=config.vocab_size)]
    trainer = bertology_trainer(bench, config, batches)
    bare = tokens_per_second(bench, trainer.train_step, s.batch * s.seq_len)
    del trainer
    versus = f"{rate / bare:.0%} of the bare step of the same model ({bare:,.0f} tok/s on ready batches)"
    return [f"`bertology pretrain --preset {s.cli_preset} --batch-size {s.batch} --max-seq-len {s.seq_len} "
            f"--precision bf16` on WikiText-2, {s.cli_steps} steps (a vocabulary trained first), {wall:.0f} s wall",
            "", f"steady speed (median of the logged windows after the first): **{rate:,.0f} tok/s**, {versus}",
            "", "Target (issue 36): >= 95% of the bare step."]


# ----- 7. every family on the device -----------------------------------------------------------


def cli(argv: list) -> tuple[int, str]:
    """Run a bertology command in this process -> (exit status, its last line of error output)."""
    from bertology.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main([str(a) for a in argv])
        except Exception as exc:  # a traceback is a failure too: reported in one line
            status, err = 1, io.StringIO(f"{type(exc).__name__}: {exc}")
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    return status, (lines[-1] if lines else "")


def features_agree(directory: Path, device: torch.device) -> str:
    """The saved model's features on the device against the CPU's: the largest difference."""
    from bertology.inference.embedding import load_encoder

    texts = ["the cat sat on the mat", "a longer sentence about the history of the river and its bridges"]
    vectors = []
    for where in (device, torch.device("cpu")):
        encoder, tokenizer = load_encoder(directory, where)
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        with torch.inference_mode():
            states = encoder(batch["input_ids"].to(where), batch["attention_mask"].to(where),
                             output_hidden_states=True).hidden_states[-1]
        vectors.append(states.float().cpu())
    return f"{(vectors[0] - vectors[1]).abs().max().item():.1e}"


def section_families(bench: Bench) -> list[str]:
    from bertology.models import FAMILIES, trained_by

    s = bench.sizes
    if not bench.corpus:
        return ["skipped: no WikiText-2 (set $BERTOLOGY_DATA or --corpus)"]
    sst2 = sst2_folder()
    lines_file = bench.scratch / "lines.txt"
    lines_file.write_text("\n".join(wikitext_lines(bench, 64)) + "\n", encoding="utf-8")
    table = [f"--device {bench.device}, --preset {s.family_preset}, {s.family_steps} steps of batch {s.family_batch} "
             f"x {s.family_seq_len} on WikiText-2, a checkpoint every {s.family_steps // 2}; then --resume, the saved "
             "model reloaded on the device and on the CPU (largest difference of their top layer's features, "
             "fp32), and the family's uses. ok, or the error's last line.", "",
             "| family | objective | pretrain | --resume | reload (device vs CPU) | embed | generate | "
             "finetune + evaluate (SST-2) |", "|---|---|---|---|---|---|---|---|"]
    for name in trained_by("pretrain"):
        spec = FAMILIES[name].spec
        for objective in spec.objectives:
            if bench.families and not {name, f"{name}:{objective}"} & set(bench.families):
                continue
            out = bench.scratch / "families" / f"{name}-{objective}"
            cells = []
            argv = ["pretrain", "--arch", name, "--objective", objective, "--corpus", *bench.corpus, "--out", out,
                    "--cache-dir", bench.scratch / "cache", "--preset", s.family_preset,
                    "--vocab-size", s.family_vocab, "--max-seq-len", s.family_seq_len,
                    "--batch-size", s.family_batch, "--max-steps", s.family_steps,
                    "--save-every", max(s.family_steps // 2, 1), "--eval-every", "0", "--log-every", "10",
                    "--device", bench.device, "--no-progress"]
            start = time.perf_counter()
            status, error = cli(argv)
            cells.append(f"ok ({time.perf_counter() - start:.0f} s)" if status == 0 else f"FAILED: {error}")
            if status == 0:
                status, error = cli(argv + ["--resume"])
                cells.append("ok" if status == 0 else f"FAILED: {error}")
                try:
                    cells.append(f"ok ({features_agree(out, bench.device)})" if spec.feature_encoder else "-")
                except Exception as exc:
                    cells.append(f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                if spec.feature_encoder:
                    status, error = cli(["embed", "--model", out, "--input", lines_file, "--out",
                                         bench.scratch / f"{name}-{objective}.npy", "--device", bench.device,
                                         "--no-progress"])
                    cells.append("ok" if status == 0 else f"FAILED: {error}")
                else:
                    cells.append("-")
                if spec.generation:
                    status, error = cli(["generate", "--model", out, "--prompt", "the history of", "--max-new-tokens",
                                         "8", "--device", bench.device])
                    cells.append("ok" if status == 0 else f"FAILED: {error}")
                else:
                    cells.append("-")
                if sst2 is not None and "sequence" in spec.heads:
                    tuned = bench.scratch / "families" / f"{name}-{objective}-sst2"
                    status, error = cli(["finetune", "--task", "sst2", "--data", sst2, "--model", out, "--out", tuned,
                                         "--max-train-examples", s.finetune_examples, "--epochs", "1",
                                         "--device", bench.device, "--no-progress"])
                    if status == 0:
                        status, error = cli(["evaluate", "--task", "sst2", "--data", sst2, "--model", tuned,
                                             "--device", bench.device])
                    cells.append("ok" if status == 0 else f"FAILED: {error}")
                else:
                    cells.append("-" if sst2 is not None else "no SST-2 data")
            cells += ["-"] * (6 - len(cells))
            table.append(f"| {name} | {objective} | " + " | ".join(c.replace("|", "/") for c in cells) + " |")
            bench.log(table[-1])
            bench.free()
    return table


# ----- 8. --compile ----------------------------------------------------------------------------


def section_compile(bench: Bench) -> list[str]:
    s = bench.sizes
    steps = s.compile_steps
    config = BertConfig.from_preset(s.compile_preset, vocab_size=30522, max_position_embeddings=max(512, s.seq_len))
    batches = [{k: v.to(bench.device) for k, v in b.items()} for b in make_batches(4, 0, s.batch, s.seq_len)]
    # inductor's C++ build takes minutes on a small CPU: the smoke run checks the paths with aot_eager.
    compile_backend = {} if bench.cuda else {"backend": "aot_eager"}
    # A cache of this run's own, so the first compiled run is a cold start (a fresh machine's); the
    # second compiles the same blocks again over it (a user's next run: inductor's caches warm).
    cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(bench.scratch / "inductor-cache")
    runs = {"eager": None, "compiled blocks, cold caches": "blocks", "compiled blocks, warm caches": "blocks",
            "compiled whole step, cold caches": "model"}
    rows = ["| run | first step (compiling) | steady step | steps done | total |", "|---|---:|---:|---:|---:|"]
    totals = {}
    real_compile = torch.compile
    try:
        torch.compile = functools.partial(real_compile, **compile_backend)
        for index, (run, scope) in enumerate(runs.items()):
            # eager and the default's cold start always run (the latter takes at least a minute); the
            # others only in what is left of --budget
            cap = s.compile_cap if index == 0 else min(s.compile_cap, max(bench.left(), 60.0 if index == 1 else 0))
            if cap < 60 and not bench.smoke:
                rows.append(f"| {run} | not run: --budget was spent | | | |")
                continue
            torch._dynamo.reset()  # each compiled run traces afresh (the warm one reuses inductor's caches only)
            trainer = bertology_trainer(bench, config, batches, compile_scope=scope)
            times = []
            start = time.perf_counter()
            while len(times) < steps and time.perf_counter() - start < cap:
                bench.sync()
                step_start = time.perf_counter()
                trainer.train_step()
                bench.sync()
                times.append(time.perf_counter() - step_start)
            total = time.perf_counter() - start
            totals[run] = (total, len(times))
            steady = statistics.median(times[len(times) // 2:]) if len(times) > 1 else float("nan")
            rows.append(f"| {run} | {times[0]:.1f} s | {steady * 1e3:.1f} ms "
                        f"({s.batch * s.seq_len / steady:,.0f} tok/s) | {len(times)} of {steps} | {total:.1f} s |")
            bench.log(rows[-1])
            del trainer
            bench.free()
    finally:
        torch.compile = real_compile
        torch._dynamo.reset()
        if cache_dir is None:  # the sections after this one, and a caller's process, keep their own cache
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    eager, _ = totals["eager"]
    verdicts = []
    for run in list(runs)[1:]:
        if run not in totals:
            continue
        total, done = totals[run]
        verdicts.append(f"{run}: {'faster' if total < eager else 'slower'} than eager over {steps} steps "
                        f"({total:.1f} s against {eager:.1f} s)" if done == steps else
                        f"{run}: did not finish {steps} steps within its cap ({done} done in {total:.0f} s)")
    return [f"BERT {s.compile_preset} pre-training steps, seq {s.seq_len}, batch {s.batch}, bf16; `--compile` "
            "compiles the repeated blocks (`--compile-scope blocks`, the default) or the whole step (`model`)"
            + ("" if bench.cuda else " (CPU smoke run: backend aot_eager)"), "", *rows, "",
            *[f"- {line}" for line in verdicts],
            "", "Target (issue 36): compiled faster than eager over its first 300 base steps."]


SECTIONS = {"peak": section_peak, "pretrain_step": section_pretrain_step, "profile": section_profile,
            "inference": section_inference,
            "embed": section_embed, "generation": section_generation, "pretrain_cli": section_pretrain_cli,
            "families": section_families, "compile": section_compile}


# ----- the page --------------------------------------------------------------------------------


def command_output(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=REPO).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def environment(bench: Bench) -> str:
    """The device with its driver and CUDA, and transformers' version (results_page's stamp gives
    the date, machine, torch and commit)."""
    if not bench.cuda:
        return f"Device: the CPU; transformers {transformers.__version__}."
    driver = command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
    return (f"Device: {torch.cuda.get_device_name(bench.device)}, driver {driver[0] if driver else 'unknown'}, "
            f"CUDA {torch.version.cuda}; transformers {transformers.__version__}.")


TITLES = {"peak": "The card's bf16 matrix-product peak", "pretrain_step": "BERT pre-training step",
          "profile": "Where the pre-training step's time goes",
          "inference": "Encoder inference", "embed": "embed on real text of mixed lengths",
          "generation": "GPT-2 greedy generation", "pretrain_cli": "The pretrain command end to end",
          "families": "Every family on the device", "compile": "--compile against eager"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, any device: checks that every section runs")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--only", nargs="+", choices=list(SECTIONS), help="run these sections only")
    parser.add_argument("--corpus", nargs="+", help="WikiText-2's files (default: $BERTOLOGY_DATA/wikitext-2-raw)")
    parser.add_argument("--results", type=Path, help="the page to write (default: docs/results/gpu.md; "
                                                     "with --smoke, a temporary file)")
    parser.add_argument("--families", nargs="+", metavar="FAMILY[:OBJECTIVE]",
                        help="the families section runs these only (default: every family and objective)")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds after which no section starts")
    args = parser.parse_args(argv)
    bench = Bench(args)
    results = args.results or (Path(tempfile.gettempdir()) / "gpu-smoke.md" if args.smoke else RESULTS / "gpu.md")
    bench.log(f"device {bench.device}; results go to {results}")
    failed = 0
    try:
        for name, section in SECTIONS.items():
            if args.only and name not in args.only:
                continue
            if bench.left() <= 0:
                lines = [f"not run: the {args.budget:.0f} s budget was spent"]
            else:
                bench.log(f"section {name}")
                try:
                    lines = section(bench)
                except Exception as exc:  # one section's failure is its result; the others still run
                    failed += 1
                    traceback.print_exc()
                    lines = [f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"]
                bench.free()
            note = " Smoke sizes: not a measurement." if args.smoke else ""
            write_section(results.stem, name, TITLES[name], "\n".join([environment(bench) + note, "", *lines]),
                          directory=results.parent)
            print("\n".join(lines), flush=True)
    finally:
        shutil.rmtree(bench.scratch, ignore_errors=True)
    bench.log(f"done: {results}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
