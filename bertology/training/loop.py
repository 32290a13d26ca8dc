"""The one training loop: pre-training, fine-tuning and distillation all run through `Trainer`.

A training job brings three things: a module whose `forward(batch)` returns a
`StepOutput` (loss + metric counts), a function giving the micro-batches of each
optimizer step, and optionally an evaluation function. The loop supplies the rest:

- AdamW without weight decay on biases and LayerNorm (every 1-D parameter), as BERT;
- a learning-rate schedule over a step or wall-clock budget: linear warmup then linear
  decay (BERT; over a wall-clock budget this is the one-cycle triangle of cramming-style
  time-budgeted training), ULMFiT's slanted triangle, or constant;
- gradient accumulation (optionally ramped up over the budget: Cramming's growing batch) and
  clipping, bf16 autocast (CPU where the processor has bf16 instructions, and CUDA), optional
  `torch.compile`, DistributedDataParallel under torchrun;
- a progress bar with tokens/s, loss and ETA, periodic evaluation;
- never losing work: atomic checkpoints (model, optimizer, RNG states, step) every N
  steps and at the end, keeping the last K; SIGINT/SIGTERM save one and stop cleanly;
  `resume=True` continues so that the losses equal those of an uninterrupted run;
- `metrics.jsonl`, and with `tensorboard=True` the same numbers as TensorBoard event files.

The settings are `TrainConfig`: the loop's own (`LoopConfig`, which every training
recipe's config is composed with) plus the step budget and bookkeeping.

Batches are a pure function of the step number, so the "data position" of a
checkpoint is just its step; with a batch ramp, of the number of micro-batches read so far,
which the checkpoint stores. On a GPU, batches that declare themselves `prefetchable` (the
pre-training batches: collation and masking on the CPU, no model) are prepared a few steps ahead
on a thread, in pinned memory (`Prefetcher`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import queue
import shutil
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Self

import torch
from torch import nn
from tqdm.auto import tqdm

from ..checkpoint import load_module_state, save_module_state
from ..config import Device, check_settings, option_name, setting
from ..errors import UserError
from ..files import loads_json, write_json_atomic, write_text_atomic
from ..models.base import compile_repeated_blocks
from ..ops import PRECISIONS, autocast, can_compile, resolve_device, resolve_precision


@dataclass
class StepOutput:
    """A micro-batch's loss and the raw counts behind its metrics (summed over micro-batches)."""

    loss: torch.Tensor
    counts: dict[str, torch.Tensor]


def accuracy_counts(name: str, predictions: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """{name_correct, name_total} for a later `correct / total`."""
    return {f"{name}_correct": (predictions == targets).sum(), f"{name}_total": torch.tensor(targets.numel())}


def metrics_from_counts(counts: dict[str, float]) -> dict[str, float]:
    """Turn summed counts into metrics: `x_accuracy` = x_correct / x_total, `x_loss` = x_loss_sum /
    x_total, `x` = x_count / x_total (a share), an AUC `x_auc` = x_auc_correct / x_auc_total (the
    ranked pairs of `objectives.ranked_pair_counts`), the LM's `perplexity` (ELMo's
    `forward_perplexity`, `backward_perplexity`), and ELECTRA's
    `rtd_balanced_accuracy` (chance = 0.5)."""
    metrics = {}
    for key, value in counts.items():
        for suffix, metric in (("_correct", "_accuracy"), ("_loss_sum", "_loss"), ("_count", "")):
            name = key.removesuffix(suffix)
            if key.endswith(suffix) and counts.get(f"{name}_total"):
                label = name if name.endswith("_auc") and suffix == "_correct" else name + metric
                metrics[label] = float(value) / float(counts[f"{name}_total"])
    for name in [name for name in metrics if name.endswith("lm_loss")]:
        # capped: exp overflows early in training
        metrics[perplexity_name(name)] = math.exp(min(metrics[name], 50.0))
    if "rtd_replaced_accuracy" in metrics and "rtd_original_accuracy" in metrics:
        metrics["rtd_balanced_accuracy"] = (metrics.pop("rtd_replaced_accuracy") + metrics.pop("rtd_original_accuracy")) / 2
    return metrics


def perplexity_name(loss_name: str) -> str:
    """The perplexity beside an LM loss: lm_loss -> perplexity, ELMo's forward_lm_loss ->
    forward_perplexity, the masked LM's mlm_loss -> mlm_perplexity."""
    stem = loss_name.removesuffix("lm_loss")
    if stem == "" or stem.endswith("_"):
        return stem + "perplexity"
    return loss_name.removesuffix("_loss") + "_perplexity"


Batch = dict[str, torch.Tensor]


SCHEDULES = ("linear", "slanted_triangular", "constant")
OPTIMIZERS = ("adamw", "adafactor")
COMPILE_SCOPES = ("blocks", "model")
CHECKPOINTS_DIR = "checkpoints"
TENSORBOARD_DIR = "tensorboard"


@dataclass
class LoopConfig(Device):
    """The training loop: optimiser, schedule, precision, seed.

    Every training command's settings are composed with these (a recipe may change a default).
    """

    lr: float = setting(1e-4, positive=True, help="peak learning rate")
    optimizer: str = setting("adamw", choices=OPTIMIZERS,
                             help="adamw (BERT's, and most models') or adafactor (T5's: factored second moments, no "
                                  "first moment, at its lr 1e-2)")
    weight_decay: float = setting(0.01, minimum=0, help="decoupled weight decay (none on biases and LayerNorm weights)")
    adam_betas: tuple[float, float] = setting((0.9, 0.999), metavar=("BETA1", "BETA2"), minimum=0, below=1,
                                              help="AdamW's betas")
    adam_eps: float = setting(1e-6, positive=True, help="AdamW's epsilon (BERT's value)")
    warmup: float = setting(0.06, minimum=0, help="learning-rate warmup: a fraction of the budget (< 1) or steps")
    schedule: str = setting("linear", choices=SCHEDULES,
                            help="learning-rate schedule: linear (BERT: warmup, then linear decay to 0 over the "
                                 "budget), slanted_triangular (ULMFiT), constant (after the warmup)")
    max_grad_norm: float = setting(1.0, minimum=0, help="clip the gradients' norm to this (0: no clipping)")
    precision: str = setting("auto", choices=PRECISIONS,
                             help="training's precision: auto is bf16 autocast where the device runs bf16 fast "
                                  "(CUDA, CPUs with AVX512-BF16 or AMX), else fp32")
    compile: bool = setting(False, help="torch.compile the model (see --compile-scope); the first step compiles")
    compile_scope: str = setting("blocks", choices=COMPILE_SCOPES,
                                 help="what --compile compiles: blocks (each repeated layer in place, one graph "
                                      "shared by the stack, the rest eager: a base BERT compiles in a third of "
                                      "the time) or model (the whole step as one graph); a family without "
                                      "repeated blocks (the LSTMs) is compiled whole")
    seed: int = setting(0, help="random seed: initialisation, data order, masking")
    progress: bool = setting(True, help="show a progress bar")
    resume: bool = setting(False, help="continue an interrupted run from the last checkpoint in the output directory")
    tensorboard: bool = setting(False, help=f"also write the metrics as TensorBoard event files in "
                                            f"OUT/{TENSORBOARD_DIR} (needs: pip install 'bertology[tensorboard]')")

    def validate(self) -> None:
        """Raise UserError naming the first unusable setting."""
        check_settings(self)


def loop_settings(config: LoopConfig) -> dict:
    """The LoopConfig fields of any config composed with it (a recipe's config -> the Trainer's)."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(LoopConfig)}


@dataclass
class TrainConfig(LoopConfig):
    """The step budget and bookkeeping.

    With LoopConfig's fields, the settings `Trainer` runs by.
    """

    max_steps: int | None = setting(None, positive=True, help="step budget (default: none; give it, --max-time "
                                                              "or both, and the first one used up ends the run)")
    max_time: float | str | None = setting(None, metavar="DURATION",
                                           help="wall-clock budget of training, e.g. 90s, 20m, 1.5h or seconds; "
                                                "the schedule is fitted to it (default: none)")
    grad_accum: int = setting(1, positive=True, help="micro-batches per optimizer step")
    batch_ramp: float = setting(0.0, minimum=0,
                                help="Cramming's batch-size ramp: the micro-batches per optimizer step grow "
                                     "linearly from 1 to --grad-accum over this fraction of the budget (steps or "
                                     "time), then stay there; 0: off, every step takes --grad-accum")
    log_every: int = setting(10, positive=True, help="write a row of metrics.jsonl every N steps")
    eval_every: int = setting(0, minimum=0, help="evaluate every N steps (0: only at the end)")
    save_every: int = setting(500, minimum=0, help="write a checkpoint every N steps (0: only at the end)")
    keep_last: int = setting(2, positive=True, help="checkpoints to keep")

    def validate(self) -> None:
        """Raise UserError naming the first unusable setting."""
        super().validate()
        if self.max_steps is None and self.max_time is None:
            raise UserError("give a step budget (--max-steps), a time budget (--max-time), or both")
        seconds = self.time_budget()
        if seconds is not None and seconds <= 0:
            raise UserError(f"--max-time must be positive, got {self.max_time!r}")
        if self.batch_ramp > 1:
            raise UserError(f"--batch-ramp is a fraction of the budget, at most 1, got {self.batch_ramp}")
        if self.batch_ramp and self.grad_accum < 2:
            raise UserError("--batch-ramp grows the micro-batches per step up to --grad-accum: give --grad-accum 2 "
                            "or more")

    def time_budget(self) -> float | None:
        """max_time in seconds (None without a time budget)."""
        return None if self.max_time is None else parse_duration(self.max_time)


def parse_duration(text: str | float) -> float:
    """'90s', '20m', '1.5h' or plain seconds -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    text = str(text).strip().lower()
    try:
        seconds = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        raise UserError(f"cannot read {text!r} as a duration (examples: 90s, 20m, 1.5h)") from None
    if not math.isfinite(seconds):  # nan <= 0 is False: every later check would let it through
        raise UserError(f"a duration must be a finite number of seconds, got {text!r}")
    return seconds


def lr_factor(schedule: str, progress: float, warmup: float) -> float:
    """Multiplier of the peak learning rate at `progress` in [0, 1] of the budget; `warmup` is a fraction.

    linear: BERT's linear warmup then linear decay to 0 (a triangle over the budget, steps or
    seconds). slanted_triangular: ULMFiT's short warmup (cut_frac = warmup) and long decay
    down to 1/32 of the peak. constant: warmup then flat.
    """
    progress = min(max(progress, 0.0), 1.0)
    if warmup > 0 and progress < warmup:
        rise = progress / warmup
        return rise if schedule != "slanted_triangular" else (1 + rise * 31) / 32
    if schedule == "constant":
        return 1.0
    decay = (1.0 - progress) / max(1.0 - warmup, 1e-8)
    return decay if schedule != "slanted_triangular" else (1 + decay * 31) / 32


def ramped_accumulation(grad_accum: int, progress: float, ramp: float) -> int:
    """Micro-batches of the step at `progress` in [0, 1] of the budget under a batch ramp over the
    first `ramp` of it: 1 at the start, growing linearly to `grad_accum`, reached at `ramp`
    (Cramming: a small batch early, while the loss falls fast, a large one later, where its
    gradients' lower noise pays). `ramp` 0: `grad_accum` throughout."""
    if not ramp:
        return grad_accum
    return 1 + math.floor((grad_accum - 1) * min(max(progress, 0.0) / ramp, 1.0) + 0.5)  # halves round up


def parameter_groups(module: nn.Module, weight_decay: float, lr: float,
                     lr_scale: Callable[[str], float] | None = None) -> list[dict]:
    """AdamW groups: decay on matrices, none on biases and LayerNorm weights (1-D tensors).

    `lr_scale(name)` multiplies a parameter's learning rate (ULMFiT's discriminative rates);
    parameters with the same scale and decay share a group.
    """
    groups: dict[tuple[float, float], list] = {}
    for name, param in module.named_parameters():
        if param.requires_grad:
            key = (weight_decay if param.ndim >= 2 else 0.0, lr_scale(name) if lr_scale else 1.0)
            groups.setdefault(key, []).append(param)
    return [{"params": params, "weight_decay": decay, "lr": lr * scale}
            for (decay, scale), params in sorted(groups.items(), key=lambda item: (-item[0][1], -item[0][0]))]


def make_optimizer(groups: list[dict], config: LoopConfig) -> torch.optim.Optimizer:
    """config.optimizer over the parameter groups: AdamW (see make_adamw) or Adafactor.

    Adafactor (Shazeer and Stern 2018) is what T5 was pre-trained and fine-tuned with: each weight
    matrix keeps a row and a column of second-moment statistics instead of a full matrix, and no
    first moment. PyTorch's version is the paper's with parameter scaling: a step moves a tensor by
    about min(lr, 1/sqrt(step)) times its own RMS (at least 1e-3), so a rate means something else
    than AdamW's: T5 used 1e-2 (constant for its first 10k steps). The schedule sets the lr as for
    AdamW; the groups' weight decay is decoupled, lr x decay x parameter.
    """
    if config.optimizer == "adafactor":
        return torch.optim.Adafactor(groups, lr=config.lr)
    return make_adamw(groups, config)


def make_adamw(groups: list[dict], config: LoopConfig) -> torch.optim.AdamW:
    """AdamW, fused into one kernel per step where PyTorch has that (CPU and CUDA, torch >= 2.4):
    the update is elementwise over every parameter, and unfused it dominates a small model's
    step (all-MiniLM-L6-v2 fine-tuning at batch 32 x 20 tokens: 295 -> 212 ms per step)."""
    try:
        return torch.optim.AdamW(groups, lr=config.lr, betas=config.adam_betas, eps=config.adam_eps, fused=True)
    except (RuntimeError, TypeError):  # an older PyTorch, or a device without the fused kernel
        return torch.optim.AdamW(groups, lr=config.lr, betas=config.adam_betas, eps=config.adam_eps)


class Distributed:
    """Rank and world size under torchrun (WORLD_SIZE > 1), or a single process; `device`: the
    `--device` setting, which picks the backend (NCCL between GPUs, else Gloo)."""

    def __init__(self, device: str = "auto"):
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.enabled = self.world_size > 1
        if self.enabled and not torch.distributed.is_initialized():
            backend = "nccl" if resolve_device(device).type == "cuda" else "gloo"  # the --device setting's
            torch.distributed.init_process_group(backend)

    @property
    def is_main(self) -> bool:
        """Only rank 0 writes files and shows progress."""
        return self.rank == 0

    def device(self, requested: str = "auto") -> torch.device:
        """This rank's device for a `--device` setting (ops.resolve_device): under CUDA its own GPU
        (LOCAL_RANK), else the CPU."""
        if resolve_device(requested).type == "cuda":
            torch.cuda.set_device(self.local_rank)
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        """Sum each value over all ranks."""
        if not self.enabled or not values:
            return values
        keys = sorted(values)
        tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64)
        torch.distributed.all_reduce(tensor)
        return dict(zip(keys, tensor.tolist()))

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.enabled:
            torch.distributed.barrier()


class StopSignal:
    """Turns SIGINT/SIGTERM into a flag the loop checks after each step; a second signal aborts."""

    def __init__(self):
        self.received: str | None = None
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                pass
        return self

    def _handle(self, signum, frame):
        if self.received:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class MetricsLog:
    """`metrics.jsonl`: one JSON object per logging step or evaluation, appended and flushed.

    With a `tensorboard` folder, every number of a row also goes there as a scalar named by
    its split ("train/loss", "eval/mlm_accuracy") at the row's step: the same values.
    """

    def __init__(self, path: Path, enabled: bool = True, tensorboard: Path | None = None):
        self.path = path
        self.enabled = enabled
        self.tensorboard = tensorboard if enabled else None
        self._writer = self._writer_class = None
        if self.tensorboard is not None:
            try:  # an optional extra: imported only when asked for, so a missing one fails before training
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise UserError("--tensorboard needs the tensorboard package: "
                                "pip install 'bertology[tensorboard]'") from None
            self._writer_class = SummaryWriter

    def open(self, step: int) -> None:
        """Start writing after `step` (0, or the step a run resumes from: TensorBoard then drops
        the events a crashed run wrote after it, as `truncate_after` drops those rows)."""
        if self.tensorboard is not None:
            self._writer = self._writer_class(str(self.tensorboard), purge_step=step + 1 if step else None)

    def truncate_after(self, step: int) -> None:
        """On resume, drop rows written after the checkpoint so the log has no duplicates."""
        if self.enabled and self.path.exists():
            rows = [line for line in self.path.read_text(encoding="utf-8").splitlines()
                    if line.strip() and json.loads(line)["step"] <= step]
            write_text_atomic(self.path, "".join(row + "\n" for row in rows))

    def write(self, row: dict) -> None:
        """Append one row (and its numbers to TensorBoard)."""
        if not self.enabled:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if self._writer is not None:
            split = row.get("split", "train")
            for key, value in row.items():
                if key not in ("step", "split") and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._writer.add_scalar(f"{split}/{key}", value, row["step"])
            self._writer.flush()  # rows are seconds apart: a run is watchable while it trains

    def close(self) -> None:
        """Finish the TensorBoard event file."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def rows(self) -> list[dict]:
        """Every row written so far."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_summary(rows: list[dict]) -> dict:
    """What a run's metrics rows add up to: steps, seconds of training (evaluation and saving
    excluded), tokens, tokens per second, and the last evaluation's metrics (`eval`)."""
    train = [row for row in rows if "split" not in row]
    tokens, previous = 0.0, 0.0
    for row in train:  # each row's rate holds for the training seconds since the row before it
        tokens += row["tokens_per_second"] * (row["elapsed"] - previous)
        previous = row["elapsed"]
    evals = [row for row in rows if row.get("split") == "eval"]
    last_eval = {k: v for k, v in evals[-1].items() if k not in ("step", "split", "elapsed")} if evals else {}
    seconds = train[-1]["elapsed"] if train else 0.0
    return {"steps": train[-1]["step"] if train else 0, "seconds": seconds, "tokens": round(tokens),
            "tokens_per_second": tokens / seconds if seconds else 0.0, "eval": last_eval}


def complete_checkpoints(out_dir: str | os.PathLike) -> list[Path]:
    """A run folder's complete checkpoints, oldest first (temp folders of interrupted writes are skipped)."""
    root = Path(out_dir) / CHECKPOINTS_DIR
    return sorted(p for p in root.glob("step-*") if (p / "state.json").is_file()) if root.exists() else []


def last_checkpoint_step(out_dir: str | os.PathLike) -> int:
    """The step of a run folder's newest complete checkpoint (0: none; a finished run's is its last step)."""
    found = complete_checkpoints(out_dir)
    return int(found[-1].name.removeprefix("step-")) if found else 0


def rate_text(per_second: float, unit: str = "step") -> str:
    """A training speed as a user reads it: "19.3 steps/s", or below one a step, "0.04 steps/s (25.0 s per step)"."""
    if per_second >= 1:
        return f"{per_second:.1f} {unit}s/s"
    return f"{per_second:.2g} {unit}s/s ({1 / per_second:.1f} s per {unit})"


def duration_text(seconds: float) -> str:
    """"45 s", "3.5 min", "2.1 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


# Training time to measure before a run says how long it will take: long enough to average a few
# steps of any size, short against any run worth estimating.
ESTIMATE_AFTER_SECONDS = 2.0


def estimate_text(per_second: float, count: float, unit: str = "step", time_budget: float | None = None) -> str:
    """The up-front estimate every training command prints once it has timed a few steps (or
    epochs): "19.3 steps/s: 4,000 steps take about 3.5 min", and when a --max-time budget ends
    the run first, how far it gets."""
    text = f"{rate_text(per_second, unit)}: {count:,.0f} {unit}s take about {duration_text(count / per_second)}"
    if time_budget is not None and time_budget < count / per_second:
        text += (f", more than the --max-time budget of {duration_text(time_budget)}: about "
                 f"{per_second * time_budget:,.0f} of them fit")
    return text


def check_finite_metrics(metrics: dict, step: int) -> None:
    """Refuse an evaluation with a NaN or infinite number: the weights have diverged, and no command
    reports such a metric as a result (nor writes the model that gave it)."""
    bad = next((name for name, value in metrics.items() if isinstance(value, float) and not math.isfinite(value)), None)
    if bad is not None:
        raise UserError(f"the held-out {bad} became {metrics[bad]} at step {step}: the model's weights have diverged "
                        "(most likely the learning rate is too high); lower --lr and start again")


def run_problems(directory: Path) -> list[str]:
    """What is wrong with a training run's record (`info --check`): its metrics.jsonl's last training
    row or last evaluation holding a NaN or infinite number (the run diverged). Empty otherwise."""
    path = directory / "metrics.jsonl"
    if not path.is_file():
        return []
    try:
        rows = [loads_json(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return [f"{path}: cannot read the run's metrics ({err})"]
    rows = [row for row in rows if isinstance(row, dict)]
    last = {split: next((r for r in reversed(rows) if (r.get("split") == "eval") == (split == "eval")), None)
            for split in ("train", "eval")}
    problems = []
    for split, row in last.items():
        bad = [k for k, v in (row or {}).items() if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            problems.append(f"{path}: the last {'evaluation' if split == 'eval' else 'training row'} (step "
                            f"{row.get('step')}) has {bad[0]} {row[bad[0]]}: the run diverged")
    return problems


WRITE_PROBE = ".write-test-"  # + the pid: the file `check_writable` writes and removes at once


def check_writable(directory: Path, needed_bytes: int) -> None:
    """Fail before training, not after an hour, if `directory` cannot hold the checkpoints."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f"{WRITE_PROBE}{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as err:
        raise UserError(f"{directory}: output directory is not writable ({err.strerror or err})") from None
    free = shutil.disk_usage(directory).free
    if free < needed_bytes:
        raise UserError(f"{directory}: only {free / 2**20:.0f} MiB free, checkpoints need about "
                        f"{needed_bytes / 2**20:.0f} MiB")


def holds_training_run(directory: Path) -> bool:
    """Whether `directory` holds a run of the loop: its checkpoints or its metrics."""
    return (directory / CHECKPOINTS_DIR).exists() or (directory / "metrics.jsonl").exists()


def check_no_earlier_run(directory: Path) -> None:
    """Before a fresh run writes anything: `directory` must be new or empty. An earlier run is
    continued with --resume; anything else there (a model copied in, the user's own vocab.txt)
    is the user's, and the run would write over it."""
    # Another process of the same run (a torchrun rank) may be probing the folder this very moment.
    entries = sorted(p.name for p in directory.iterdir() if not p.name.startswith(WRITE_PROBE)) if directory.is_dir() else []
    if holds_training_run(directory):
        raise UserError(f"{directory} already holds a training run; continue it with --resume "
                        "or choose another output directory")
    if entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise UserError(f"{directory} is not empty ({shown}): a training run writes only into a new or empty "
                        "folder, so that nothing of yours is overwritten; choose another output directory")


# What a resumed run may change: its budget, where it is, and its bookkeeping. Any other setting would
# make the rest of the run train something else than its first part did (and its record say so wrongly).
CHANGEABLE_ON_RESUME = ("resume", "progress", "tensorboard", "compile", "compile_scope", "precision", "out", "cache_dir",
                        "max_steps", "max_time", "epochs", "log_every", "eval_every", "save_every", "keep_last",
                        "eval_batches")


def check_resumed_settings(previous: dict, current: dict, source: Path) -> None:
    """On --resume: refuse, listing them, the settings (`current`, a config as a dict) that differ from
    those the run was started with (`previous`, as its record or checkpoint holds them)."""
    current = loads_json(json.dumps(current))  # tuples as lists, as a record holds them
    changed = [f"{option_name(name)} {json.dumps(previous[name])} -> {json.dumps(value)}"
               for name, value in current.items()
               if name not in CHANGEABLE_ON_RESUME and name in previous and previous[name] != value]
    if changed:
        raise UserError(f"{source}: --resume with other settings than the run was started with "
                        f"({'; '.join(changed)}); resume with the run's settings, or start a new run elsewhere")


def check_resumed_record(record: Path, current: dict) -> None:
    """On --resume, before any work: when `record` (a recipe's JSON record of the run's settings,
    e.g. pretrain_config.json) exists, refuse settings that differ from it (check_resumed_settings)."""
    if not record.is_file():
        return
    try:
        previous = loads_json(record.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{record}: cannot read the earlier run's settings ({err})") from None
    if not isinstance(previous, dict):
        raise UserError(f"{record}: not a record of a run's settings")
    check_resumed_settings(previous, current, record)


def read_checkpoint_state(folder: Path) -> dict:
    """A checkpoint's state.json, checked: the step its folder is named after (at most its run's
    budget), a finite elapsed time, and the settings it was made with. A one-line error otherwise."""
    path = folder / "state.json"
    try:
        state = loads_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: cannot read this checkpoint's state ({err})") from None
    if not isinstance(state, dict) or not isinstance(state.get("config"), dict):
        raise UserError(f"{path}: not a checkpoint's state (step, elapsed, config)")
    step, elapsed, budget = state.get("step"), state.get("elapsed"), state["config"].get("max_steps")
    if type(step) is not int or f"step-{step:08d}" != folder.name or (type(budget) is int and step > budget):
        raise UserError(f"{path}: step {step!r} is not the step of this checkpoint ({folder.name}"
                        f"{f', of a run of {budget} steps' if type(budget) is int else ''}); the checkpoint is damaged")
    if type(elapsed) not in (int, float) or not 0 <= elapsed < math.inf:
        raise UserError(f"{path}: elapsed time {elapsed!r} is not a number of seconds; the checkpoint is damaged")
    return state


class Prefetcher:
    """Step -> micro-batches, prepared `depth` steps ahead on a background thread (and copied into
    pinned memory for a CUDA device, so that the copy to the GPU runs beside its work), so that the
    GPU does not wait while the CPU collates and masks the next batch.

    `micro_batches(step)` must be a pure function of the step that touches no model (the loop's
    pre-training batches declare that with `prefetchable = True`). Steps are asked for in order;
    one out of order (a resume) starts the thread again from there. An error raised while preparing
    a step is raised by the call for that step, in the training thread."""

    def __init__(self, micro_batches: Callable[[int], list[Batch]], pin_memory: bool, depth: int = 2):
        self.micro_batches, self.pin_memory, self.depth = micro_batches, pin_memory, depth
        self._thread: threading.Thread | None = None
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._next_step: int | None = None

    def __call__(self, step: int) -> list[Batch]:
        if step != self._next_step:
            self._start(step)
        prepared = self._queue.get()
        if isinstance(prepared, BaseException):
            self.close()
            raise prepared
        self._next_step = step + 1
        return prepared

    def _start(self, step: int) -> None:
        self.close()
        self._stop, self._queue = threading.Event(), queue.Queue(maxsize=self.depth)
        self._thread = threading.Thread(target=self._work, args=(step, self._queue, self._stop),
                                        name="bertology-prefetch", daemon=True)
        self._thread.start()

    def _work(self, step: int, out: queue.Queue, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                prepared = self.micro_batches(step)
                if self.pin_memory:
                    prepared = [{k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                                for batch in prepared]
            except BaseException as error:  # noqa: BLE001 - handed to the training thread, which raises it
                prepared = error
            while not stop.is_set():
                try:
                    out.put(prepared, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(prepared, BaseException):
                return
            step += 1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Stop the thread (the steps it prepared ahead are dropped)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self._next_step = None


class Trainer:
    """Runs the loop described in the module docstring.

    Args:
        module: forward(batch) -> StepOutput; its parameters are trained.
        config: TrainConfig.
        out_dir: where metrics.jsonl and checkpoints/ go.
        micro_batches: step -> this rank's `grad_accum` micro-batches (already prepared). With a batch
            ramp, its `window(first, count)` gives this rank's micro-batches number first .. first +
            count - 1 of the run instead (`micro_batches(step)` being `window(step * grad_accum,
            grad_accum)`).
        evaluate: module -> metrics dict, run on rank 0 every `eval_every` steps and at the end.
        save_model: called with the (unwrapped) module at the end and at every checkpoint, to
            write the user-facing model (e.g. the HF-layout encoder) into out_dir.
        lr_scale: parameter name -> learning-rate multiplier (see `parameter_groups`).
        on_speed: called once with the steps per second, when the run has timed its first steps
            (after `ESTIMATE_AFTER_SECONDS`), beside the estimate the loop prints: a recipe's own
            estimate of a longer job (the demo's).
        on_start: called on rank 0 once the run starts (its output checked, a resume's checkpoint
            and settings accepted): where a recipe writes its record of the run.
    """

    def __init__(self, module: nn.Module, config: TrainConfig, out_dir: str | os.PathLike,
                 micro_batches: Callable[[int], list[Batch]],
                 evaluate: Callable[[nn.Module], dict] | None = None,
                 save_model: Callable[[nn.Module], None] | None = None,
                 dist: Distributed | None = None,
                 lr_scale: Callable[[str], float] | None = None,
                 on_speed: Callable[[float], None] | None = None, on_start: Callable[[], None] | None = None):
        config.validate()
        self.config = config
        self.out_dir = Path(out_dir)
        self.dist = dist or Distributed(config.device)
        self.device = self.dist.device(config.device)
        self.precision = resolve_precision(config.precision, self.device)
        self.module = module.to(self.device)
        self.micro_batches = micro_batches
        # A batch ramp's step sizes follow the clock, so its steps cannot be prepared ahead.
        prefetch = self.device.type == "cuda" and getattr(micro_batches, "prefetchable", False) and not config.batch_ramp
        self.prefetcher = Prefetcher(micro_batches, pin_memory=True) if prefetch else None
        self.evaluate_fn = evaluate
        self.save_model_fn = save_model
        self.on_speed = on_speed
        self.on_start = on_start
        self.optimizer = make_optimizer(parameter_groups(module, config.weight_decay, config.lr, lr_scale), config)
        for group in self.optimizer.param_groups:
            group["peak_lr"] = group["lr"]
        if config.batch_ramp and not hasattr(micro_batches, "window"):
            raise UserError("--batch-ramp: this objective's batches come in a fixed number per step (a carried "
                            "stream); ramp the batch of a masked or causal LM over sequences instead")
        self.step = 0
        self.micro_batches_read = 0  # per rank: where the next step's batches start, under a batch ramp
        self.elapsed = 0.0  # seconds of training so far, across resumes (eval and saving excluded)
        self.time_budget = config.time_budget()  # seconds, or None
        self.log = MetricsLog(self.out_dir / "metrics.jsonl", self.dist.is_main,
                              self.out_dir / TENSORBOARD_DIR if config.tensorboard else None)
        self.wrapped = self._wrap(module)

    def _wrap(self, module: nn.Module) -> nn.Module:
        if self.dist.enabled:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            # No buffer broadcast: a recurrent objective's buffers hold each rank's own carried state.
            module = nn.parallel.DistributedDataParallel(module, device_ids=device_ids, broadcast_buffers=False)
        if self.config.compile:
            if not can_compile(self.device):  # else PyTorch fails inside the first step, in a traceback
                raise UserError("--compile: PyTorch finds no compiler here (on a CPU: g++ or clang; cl on Windows); "
                                "install one, or leave --compile out")
            # The number of masked positions differs from batch to batch: traced as a size read from
            # the data (the nonzero of the labels) instead of a graph break at every step.
            torch._dynamo.config.capture_dynamic_output_shape_ops = True
            # Blocks see no marked input (they take the embeddings' output), so their sizes are dynamic
            # from the first compilation: one graph for every batch size and length.
            if self.config.compile_scope == "model" or not compile_repeated_blocks(module, dynamic=True):
                module = torch.compile(module)
        return module

    # ----- schedule -------------------------------------------------------------------------

    def progress(self) -> float:
        """Fraction of the budget used: steps or wall-clock, whichever runs out first."""
        fractions = []
        if self.config.max_steps:
            fractions.append(self.step / self.config.max_steps)
        if self.time_budget:
            fractions.append(self.elapsed / self.time_budget)
        return max(fractions)

    def warmup_fraction(self) -> float:
        """The warmup as a fraction of the budget (a step count is converted through max_steps)."""
        warmup = self.config.warmup
        if warmup < 1:
            return warmup
        if self.config.max_steps:
            return min(warmup / self.config.max_steps, 1.0)
        return 0.06  # a step count with only a time budget: fall back to BERT-like 6%

    def accumulation(self) -> int:
        """Micro-batches of the next step (`ramped_accumulation` at the current progress)."""
        return ramped_accumulation(self.config.grad_accum, self.progress(), self.config.batch_ramp)

    def micro_batches_per_step_ahead(self) -> float:
        """The steps left's mean micro-batches per step: --grad-accum, or under a batch ramp the ramp's
        mean over the steps left (a time budget: over its time left, weighing each step by its time)."""
        if not self.config.batch_ramp:
            return float(self.config.grad_accum)
        def ramp(progress: float) -> int:
            return ramped_accumulation(self.config.grad_accum, progress, self.config.batch_ramp)

        if self.config.max_steps:
            ahead = range(self.step, self.config.max_steps)
            return sum(ramp(step / self.config.max_steps) for step in ahead) / max(len(ahead), 1)
        start = self.progress()
        points = [start + (1 - start) * (k + 0.5) / 100 for k in range(100)]
        return len(points) / sum(1 / ramp(point) for point in points)

    def set_lr(self) -> float:
        """Set every group's lr for the current progress; return the first (largest) group's."""
        factor = lr_factor(self.config.schedule, self.progress(), self.warmup_fraction())
        for group in self.optimizer.param_groups:
            group["lr"] = group["peak_lr"] * factor
        return self.optimizer.param_groups[0]["lr"]

    # ----- one step -------------------------------------------------------------------------

    def to_device(self, batch: Batch) -> Batch:
        """Move a batch's tensors to the training device (under --compile, every size marked as one
        that may change: a batch's length is its longest text's, and the last batch may be short, so
        one compiled graph serves every batch instead of a recompilation at the first new size)."""
        moved = {k: v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                 for k, v in batch.items()}
        if self.config.compile:
            for tensor in moved.values():
                if isinstance(tensor, torch.Tensor):
                    for dim in range(tensor.dim()):
                        torch._dynamo.maybe_mark_dynamic(tensor, dim)
        return moved

    def train_step(self) -> tuple[float, dict[str, float], int]:
        """One optimizer step over this rank's micro-batches -> (mean loss, counts, tokens)."""
        self.wrapped.train()
        if self.config.batch_ramp:
            batches = self.micro_batches.window(self.micro_batches_read, self.accumulation())
        else:
            batches = (self.prefetcher or self.micro_batches)(self.step)
        self.micro_batches_read += len(batches)
        lr = self.set_lr()
        # Sums stay tensors on the device until the step ends: one host sync per step, not per micro-batch.
        sums: dict[str, torch.Tensor | float] = {"loss": 0.0, "tokens": 0.0}
        for i, batch in enumerate(batches):
            batch = self.to_device(batch)
            last = i == len(batches) - 1
            sync = contextlib.nullcontext() if last or not self.dist.enabled else self.wrapped.no_sync()
            with sync:
                with autocast(self.precision, self.device):
                    out: StepOutput = self.wrapped(batch)
                (out.loss / len(batches)).backward()
            for key, value in {"loss": out.loss.detach(), "tokens": batch["attention_mask"].sum(), **out.counts}.items():
                sums[key] = sums.get(key, 0.0) + value
        norm = torch.zeros(())
        if self.config.max_grad_norm:
            norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.config.max_grad_norm)
        # The step's one host sync, before the optimizer steps: a NaN or infinite loss (or gradient)
        # stops the run with the model as it was before this step.
        values = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=self.device) for v in sums.values()]
                             + [norm.to(self.device, torch.float64)]).tolist()
        totals, grad_norm = dict(zip(sums, values)), values[-1]
        if not (math.isfinite(totals["loss"]) and math.isfinite(grad_norm)):
            raise UserError(self.divergence(totals["loss"], grad_norm, lr))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        totals = self.dist.sum({**totals, "micro_batches": len(batches)})
        loss = totals.pop("loss") / totals.pop("micro_batches")
        tokens = int(totals.pop("tokens"))
        return loss, {**totals, "lr": lr, "micro_batches": len(batches)}, tokens

    def divergence(self, loss: float, grad_norm: float, lr: float) -> str:
        """The one-line error of a step whose loss or gradient norm is NaN or infinite."""
        what = f"the loss became {loss}" if not math.isfinite(loss) else f"the gradients' norm became {grad_norm}"
        kept = self.checkpoints()
        where = f"its last good checkpoint is {kept[-1]}" if kept else "no checkpoint had been written yet"
        return (f"{what} at step {self.step + 1} (learning rate {lr:.3g}): the learning rate is most likely too "
                f"high, or its warmup too short; lower --lr and start again. The run stopped before that step "
                f"changed the model; {where}")

    # ----- evaluation, checkpoints ----------------------------------------------------------

    def run_evaluation(self) -> dict | None:
        """Evaluate on rank 0 (others wait); log and return the metrics."""
        if self.evaluate_fn is None:
            return None
        metrics = None
        if self.dist.is_main:
            self.module.eval()
            with torch.no_grad(), autocast(self.precision, self.device):
                metrics = self.evaluate_fn(self.module)
            check_finite_metrics(metrics, self.step)
            self.log.write({"step": self.step, "split": "eval", "elapsed": round(self.elapsed, 2), **metrics})
        self.dist.barrier()
        return metrics

    def checkpoint_dir(self, step: int) -> Path:
        """Where the checkpoint of `step` lives."""
        return self.out_dir / CHECKPOINTS_DIR / f"step-{step:08d}"

    def save_checkpoint(self) -> Path | None:
        """Write model, optimizer, RNG states and step into a temp folder, then rename it into place;
        then the user-facing model (`save_model`).

        Trained weights are never lost to a failed save: a checkpoint that cannot be written leaves
        the earlier ones as they were (pruned only after the new one is in place), and when the
        user-facing model cannot be written the checkpoint holding its weights is complete: the
        error says where, and --resume writes the model again."""
        self.dist.barrier()
        final = self.checkpoint_dir(self.step)
        if self.dist.is_main:
            if not final.exists():
                self.write_checkpoint(final)
            if self.save_model_fn is not None:
                try:
                    self.save_model_fn(self.module)
                except BaseException:
                    print(f"writing the model failed; its weights (step {self.step:,}) are safe in {final}: fix the "
                          "cause and run again with --resume to write it", file=sys.stderr)
                    raise
        self.dist.barrier()
        return final

    def write_checkpoint(self, final: Path) -> None:
        """The checkpoint folder `final`, written as `.<name>.tmp` and renamed into place; older
        ones beyond `keep_last` are removed after. A failed write removes its temp folder and says
        which checkpoint is the last complete one."""
        tmp = final.with_name(f".{final.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
            save_module_state(self.module, tmp / "module.safetensors")  # tied weights, and cuDNN's LSTM buffers
            torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save({"torch": torch.get_rng_state(),
                        "cuda": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else []},
                       tmp / "rng.pt")
            write_json_atomic(tmp / "state.json", {"step": self.step, "elapsed": self.elapsed,
                                                   "micro_batches": self.micro_batches_read,
                                                   "config": asdict(self.config)})
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            found = self.checkpoints()
            print(f"writing the checkpoint of step {self.step:,} failed; "
                  + (f"the last complete one is {found[-1]} (--resume continues from it)" if found
                     else "no earlier checkpoint was written"), file=sys.stderr)
            raise
        os.replace(tmp, final)
        self.prune_checkpoints()

    def prune_checkpoints(self) -> None:
        """Keep only the newest `keep_last` checkpoints."""
        for old in sorted(self.checkpoints())[: -self.config.keep_last or None]:
            shutil.rmtree(old, ignore_errors=True)

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest first (see `complete_checkpoints`)."""
        return complete_checkpoints(self.out_dir)

    def resume(self) -> bool:
        """Load the newest complete checkpoint, if any; return whether one was loaded."""
        found = self.checkpoints()
        if not found:
            return False
        latest = found[-1]
        state = read_checkpoint_state(latest)
        check_resumed_settings(state["config"], asdict(self.config), latest / "state.json")
        try:
            load_module_state(self.module, latest / "module.safetensors", self.device)
            self.optimizer.load_state_dict(torch.load(latest / "optimizer.pt", map_location=self.device,
                                                      weights_only=True))
            rng = torch.load(latest / "rng.pt", weights_only=True)
            torch.set_rng_state(rng["torch"])
        except Exception as err:  # a damaged checkpoint is the user's to fix or delete
            # The first line only: torch's state-dict and weights_only messages run to dozens of lines.
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"{latest}: cannot resume from this checkpoint: it does not fit this model and "
                            f"optimizer, or is damaged ({reason})") from None
        if rng.get("cuda") and self.device.type == "cuda":
            torch.cuda.set_rng_state_all(rng["cuda"])
        self.step, self.elapsed = state["step"], state["elapsed"]
        self.micro_batches_read = state.get("micro_batches", self.step * self.config.grad_accum)
        self.log.truncate_after(self.step)
        return True

    def estimated_checkpoint_bytes(self) -> int:
        """Model + two AdamW moments, fp32, for each kept checkpoint plus the final model."""
        params = sum(p.numel() for p in self.module.parameters())
        return params * 4 * 3 * (self.config.keep_last + 1)

    # ----- the loop -------------------------------------------------------------------------

    @staticmethod
    def _new_window() -> dict:
        """Sums over the steps since the last log row."""
        return {"loss": 0.0, "steps": 0, "tokens": 0, "seconds": 0.0, "micro_batches": 0, "counts": {}}

    def finished(self) -> bool:
        """Whether the step or time budget is used up."""
        return self.progress() >= 1.0

    def announce_speed(self, steps_per_second: float, first_step: int, first_elapsed: float) -> None:
        """Say up front (rank 0) how fast the run trains and how long its steps from `first_step`
        (0, or where it resumed, `first_elapsed` seconds into its time budget) take."""
        if not self.dist.is_main:
            return
        budget = None if self.time_budget is None else self.time_budget - first_elapsed
        steps = self.config.max_steps - first_step if self.config.max_steps else steps_per_second * budget
        tqdm.write(f"training at {estimate_text(steps_per_second, steps, time_budget=budget)} "
                   f"({f'resumed at step {first_step:,}; ' if first_step else ''}evaluations aside)", file=sys.stderr)
        if self.on_speed is not None:
            self.on_speed(steps_per_second)

    def fit(self) -> str:
        """Train until the budget is used or a stop signal arrives (first loading the last
        checkpoint when `config.resume`).

        Returns "completed" or "interrupted"; either way the last state is checkpointed.
        """
        check_writable(self.out_dir, self.estimated_checkpoint_bytes())
        if not self.config.resume and holds_training_run(self.out_dir):  # the recipe may have written its files
            check_no_earlier_run(self.out_dir)
        torch.manual_seed(self.config.seed + self.dist.rank)
        if self.config.resume and self.resume() and self.dist.is_main:
            print(f"resumed from step {self.step}", file=sys.stderr)
        if self.on_start is not None and self.dist.is_main:
            self.on_start()
        self.log.open(self.step)
        first_step, first_elapsed = self.step, self.elapsed
        bar = tqdm(total=self.config.max_steps, initial=self.step, disable=not (self.config.progress and self.dist.is_main),
                   unit="step", dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 30)
        window = self._new_window()
        status = "completed"
        timed_micro_batches, timed_seconds, announced = 0, 0.0, False  # what gives the up-front estimate
        with StopSignal() as stop, self.prefetcher or contextlib.nullcontext():  # its thread ends with the loop
            while not self.finished():
                start = time.perf_counter()
                loss, counts, tokens = self.train_step()
                seconds = time.perf_counter() - start
                self.elapsed += seconds
                if self.config.compile and self.step == first_step + 1 and self.dist.is_main:
                    print(f"compiling took {seconds:.1f} s (the first step, compiled and run)", file=sys.stderr)
                if self.step > first_step + 1 and not announced:  # not the first: its allocations are slow
                    timed_micro_batches, timed_seconds = timed_micro_batches + counts["micro_batches"], \
                        timed_seconds + seconds
                    if timed_seconds >= ESTIMATE_AFTER_SECONDS and not self.finished():
                        steps_per_second = timed_micro_batches / timed_seconds / self.micro_batches_per_step_ahead()
                        self.announce_speed(steps_per_second, first_step, first_elapsed)
                        announced = True
                lr = counts.pop("lr")
                window["micro_batches"] += counts.pop("micro_batches")
                window["loss"] += loss
                window["steps"] += 1
                window["tokens"] += tokens
                window["seconds"] += seconds
                for key, value in counts.items():
                    window["counts"][key] = window["counts"].get(key, 0.0) + value
                bar.update(1)
                if self.step % self.config.log_every == 0 or self.finished():
                    row = {"step": self.step, "loss": window["loss"] / window["steps"], "lr": lr,
                           "tokens_per_second": window["tokens"] / window["seconds"],
                           "elapsed": round(self.elapsed, 2), **metrics_from_counts(window["counts"])}
                    if self.config.batch_ramp:  # the effective batch: micro-batches per step, on average
                        row["micro_batches_per_step"] = window["micro_batches"] / window["steps"]
                    self.log.write(row)
                    postfix = {"loss": f"{row['loss']:.3f}", "tok/s": f"{row['tokens_per_second']:,.0f}"}
                    if self.time_budget:
                        postfix["left"] = f"{max(self.time_budget - self.elapsed, 0):.0f}s"
                    bar.set_postfix(postfix, refresh=False)
                    window = self._new_window()
                if self.config.eval_every and self.step % self.config.eval_every == 0 and not self.finished():
                    self.run_evaluation()
                if self.config.save_every and self.step % self.config.save_every == 0 and not self.finished():
                    self.save_checkpoint()
                if stop.received:
                    status = "interrupted"
                    break
        bar.close()
        if status == "completed":
            self.run_evaluation()
        self.save_checkpoint()
        self.log.close()
        if status == "interrupted" and self.dist.is_main:
            print(f"stopped by {stop.received} at step {self.step}; checkpoint saved in "
                  f"{self.checkpoint_dir(self.step)}; continue with --resume", file=sys.stderr)
        return status
