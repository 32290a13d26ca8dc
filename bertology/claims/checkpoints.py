"""Downstream scores along one pre-training run: the step shared by the claims that plot a
fine-tuned score against pre-training progress (claim 4 against steps, claim 8 against FLOPs).

The models at steps s1 < ... < sn come from ONE run of sn steps, not from one run per
budget: a run of s steps has its own schedule (its learning rate decays to 0 at s), so a
separate shorter run is neither the same model nor cheaper to make. The training loop
(training/loop.py) writes a checkpoint every `save_every` steps into `checkpoints/step-N/`
(`module.safetensors`: the whole objective module, heads and ELECTRA's generator included;
the optimizer and RNG states; the step) and keeps the last `keep_last`; the model directory
it writes at the run's root is overwritten at every checkpoint, so an intermediate model
exists only as a checkpoint. Without changing the loop, the run here saves every
gcd(s1, ..., sn) steps and keeps them all (pre-training's resume works as usual); when it
has finished, each kept step's checkpoint is loaded into the objective module rebuilt from
the run's settings and written as pre-training writes its final model (`model_to_save()`
and the tokenizer), into `steps/step-N/`. The checkpoints (optimizer states: twice the
model) are then deleted. The cost is disk during the run (the mini BERT: 16 checkpoints of
about 130 MB), no compute. The run also evaluates on its held-out documents at every saved
step, so the pre-training metrics (MLM accuracy, ELECTRA's rtd_auc, ...) sit beside the
downstream scores.

Runs are cached by content as `Experiment.pretrained` caches them: the key is
`pretraining_key` over the settings and the steps kept.

`training_flops_per_step` counts a step's compute from the model config and the batch shape,
so that runs of different objectives can be put on one compute axis.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..checkpoint import load_module_state
from ..data.tokenizer import Tokenizer
from ..files import loads_json
from ..models import family_named
from ..models.base import SIZES
from ..models.bert import BertConfig, electra_generator_config
from ..recipes.pretrain import PretrainConfig, build_model_config, run_pretraining
from ..training.loop import CHECKPOINTS_DIR
from ..training.objectives import OBJECTIVES, build_objective
from .experiment import LIGHT_GLUE_RECIPE, Experiment, minilm, pretraining_key

# The runs of claims 4 and 8: the mini BERT at MINI_MLM's shape and rate (experiment.py), for
# 1,024 steps so that the left-to-right run (about 2.4x a masked-LM step: it predicts every
# token over the 30,522-word vocabulary) and the fine-tuning fit claim 4's 90 minutes. Both
# claims take their masked LM from MLM_RUN, so the second one finds it in the cache.
RUN_SHAPE = {"preset": "mini", "max_seq_len": 64, "batch_size": 32, "lr": 1e-3, "max_steps": 1024, "seed": 0}
MLM_RUN = {**RUN_SHAPE, "objective": "roberta"}  # masked LM over full sentences, no NSP (as ELECTRA's BERT)
CHECKPOINTS = 5  # kept steps, each double the one before: max/16, max/8, max/4, max/2, max
QUICK_CHECKPOINTS = 2
EVAL_BATCHES = 10  # held-out batches at each saved step: enough for the curves, ~5% of the run's time

def doubling_steps(max_steps: int, count: int) -> list[int]:
    """`count` steps ending at `max_steps`, each double the one before (rounded down): 1024, 5 ->
    64, 128, 256, 512, 1024. Early points are where the curves move most."""
    steps = sorted({max_steps // 2**k for k in range(count)})
    if steps[0] < 1 or len(steps) < count:
        raise ValueError(f"{max_steps} steps cannot be halved {count - 1} times")
    return steps


@dataclass
class CheckpointedRun:
    """A finished pre-training run and the model directories kept along it."""

    folder: Path
    steps: list[int]

    def model(self, step: int) -> Path:
        """The model directory at `step` (config.json, model.safetensors, the tokenizer)."""
        return self.folder / "steps" / f"step-{step:08d}"

    def models(self) -> dict[int, Path]:
        """step -> model directory, every kept step."""
        return {step: self.model(step) for step in self.steps}

    def settings(self) -> dict:
        """The run's pre-training settings."""
        return loads_json((self.folder / "claim_settings.json").read_text(encoding="utf-8"))

    def held_out(self) -> dict[int, dict]:
        """step -> the held-out metrics the run logged there, for every kept step."""
        rows = [loads_json(line) for line in (self.folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
                if line.strip()]
        evals = {row["step"]: row for row in rows if row.get("split") == "eval"}
        return {step: evals[step] for step in self.steps if step in evals}

    def flops_per_step(self) -> float:
        """Training FLOPs of one step of this run (see `training_flops_per_step`)."""
        settings = self.settings()
        return training_flops_per_step(BertConfig.load(self.model(self.steps[-1])), settings["objective"],
                                       settings["batch_size"] * settings.get("grad_accum", 1), settings["max_seq_len"],
                                       settings.get("generator_size", 0.25))


def pretrained_at_steps(experiment: Experiment, steps: Sequence[int], **settings: Any) -> CheckpointedRun:
    """One pre-training run of max(steps) steps (PretrainConfig settings) with a model directory
    kept at each of `steps`; from the cache when a claim has run it before (see the module docstring)."""
    steps = sorted(set(steps))
    every = math.gcd(*steps)
    settings = {"tokenizer": str(minilm()), "corpus": experiment.corpus(), **settings,
                "max_steps": steps[-1], "eval_every": every, "eval_batches": EVAL_BATCHES}
    if family_named(settings.get("arch", "bert")).spec.reads_stream:
        raise ValueError("checkpoints along a run are kept for the Transformer families, not the LSTMs")
    key = pretraining_key({**settings, "kept_steps": steps})

    def train(partial: Path, resume: bool) -> None:
        cfg = PretrainConfig(out=str(partial), cache_dir=str(experiment.cache), resume=resume, progress=False,
                             save_every=every, keep_last=steps[-1] // every, device=experiment.device, **settings)
        if run_pretraining(cfg) == "interrupted":
            raise KeyboardInterrupt
        for step in steps:
            export_checkpoint(cfg, step, CheckpointedRun(partial, steps).model(step))
        # Every kept model is written: what the checkpoints add is optimizer state, twice the model's size.
        shutil.rmtree(partial / CHECKPOINTS_DIR, ignore_errors=True)

    return CheckpointedRun(experiment.cached("checkpointed", key, {**settings, "kept_steps": steps}, train), steps)


def export_checkpoint(cfg: PretrainConfig, step: int, target: Path) -> Path:
    """Write the model of the checkpoint at `step` of the run `cfg` describes as a model directory,
    as the run writes its final model: the objective module is rebuilt as pre-training builds it
    (recipes/pretrain.py's `sequence_training`), the checkpoint's weights are loaded into it, and
    its `model_to_save()` and the tokenizer are written."""
    run = Path(cfg.out)
    tokenizer = Tokenizer.from_pretrained(run)
    cfg.validate()  # the objective named by the run's settings, resolved as pre-training resolved it
    objective = build_objective(cfg.objective, build_model_config(cfg, tokenizer), tokenizer.mask_token_id,
                                sentinel_ids=tokenizer.sentinel_token_ids, **cfg.objective_options())
    load_module_state(objective, run / CHECKPOINTS_DIR / f"step-{step:08d}" / "module.safetensors")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    objective.model_to_save().save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    os.replace(partial, target)
    return target


def training_flops_per_step(config: BertConfig, objective: str, rows: int, seq_len: int,
                            generator_size: float = 0.25, mlm_probability: float = 0.15) -> float:
    """FLOPs of one training step of a BERT-family objective, counted analytically: the matrix
    products of the forward pass (2 per multiply-add) times 3 for forward + backward, over the
    full batch shape (rows x seq_len, padding included: the code computes it).

    Per token: each layer's Q/K/V and output projections and feed-forward, the attention scores
    and mixing (2 x seq_len x hidden each), ALBERT's embedding projection; the LM head (dense,
    then the tied vocabulary matrix) at the positions predicted: 15% for the masked LMs and
    ELECTRA's generator, every position for the left-to-right LM. ELECTRA counts both networks:
    the generator (`electra_generator_config`, with its head at the masked positions) and the
    discriminator with its per-token detector (dense + one logit). NSP/SOP heads, softmaxes,
    LayerNorms and ELECTRA's sampling are left out (each under 1% at these sizes).
    """
    role = OBJECTIVES[objective].role if objective in OBJECTIVES else None
    if role in ("masked_lm", "masked_lm_with_pair"):
        per_token = encoder_flops(config, seq_len) + mlm_probability * lm_head_flops(config)
    elif role == "causal_lm":
        per_token = encoder_flops(config, seq_len) + lm_head_flops(config)
    elif role == "replaced_token_detection":
        generator = electra_generator_config(config, generator_size)
        detector = 2 * (config.hidden_size * config.hidden_size + config.hidden_size)
        per_token = (encoder_flops(config, seq_len) + detector + encoder_flops(generator, seq_len)
                     + mlm_probability * lm_head_flops(generator))
    else:
        raise ValueError(f"no FLOP count for the {objective!r} objective")
    return 3 * per_token * rows * seq_len


def encoder_flops(config: BertConfig, seq_len: int) -> float:
    """Forward FLOPs per token of the encoder's matrix products at sequence length `seq_len`."""
    hidden, inner = config.hidden_size, config.intermediate_size
    layer = 2 * (4 * hidden * hidden + 2 * hidden * inner) + 2 * 2 * seq_len * hidden
    projection = 2 * config.embedding_width * hidden if config.embedding_width != hidden else 0
    return config.num_hidden_layers * layer + projection


def lm_head_flops(config: BertConfig) -> float:
    """Forward FLOPs of the LM head at one predicted position: hidden -> embedding width, then the vocabulary."""
    return 2 * (config.hidden_size * config.embedding_width + config.embedding_width * config.vocab_size)


def downstream_curves(experiment: Experiment, name: str, models: dict[int, Path]) -> dict[str, dict[int, list[float]]]:
    """Fine-tune each model (step -> model directory) on SST-2 and MRPC over the seeds (the light
    recipe: ten models a claim): task -> step -> every seed's accuracy."""
    by_step = {step: experiment.glue_accuracies(f"{name}-step-{step}", model, LIGHT_GLUE_RECIPE)
               for step, model in models.items()}
    return {task: {step: scores[task] for step, scores in by_step.items()} for task in LIGHT_GLUE_RECIPE}


def run_scale(experiment: Experiment, settings: dict, steps: list[int]) -> str:
    """What the runs of `pretrained_at_steps` with these settings are, in words (for a claim's scale)."""
    layers, hidden = SIZES[settings["preset"]]
    corpus = ("WikiText-2 valid" if experiment.quick else
              "WikiText-2 valid + 40 Project Gutenberg books (10.8M words)")
    return (f"Pre-training: the {settings['preset']} BERT ({layers} layers, {hidden} wide, all-MiniLM-L6-v2's "
            f"30,522-token vocabulary), {settings['max_steps']:,} steps of {settings['batch_size']} x "
            f"{settings['max_seq_len']} tokens at lr {settings['lr']:g} (linear warmup and decay) on {corpus}; the "
            f"models kept at steps {', '.join(f'{s:,}' for s in steps)} of that one run.")


def curve_rows(curves: dict[str, dict[str, dict[int, list[float]]]], steps: list[int]) -> tuple[list[str], list[dict]]:
    """The table of the curves: (columns, rows), a row per model and task, a column per kept step.

    Args:
        curves: model label -> task -> step -> every seed's score.
    """
    columns = ["model", "task", *(f"step {step:,}" for step in steps)]
    rows = [{"model": model, "task": task, **{f"step {step:,}": values[step] for step in steps}}
            for model, tasks in curves.items() for task, values in tasks.items()]
    return columns, rows


def held_out_note(label: str, run: CheckpointedRun, keys: Sequence[str]) -> str:
    """One line of the run's held-out pre-training metrics at each kept step."""
    held_out = run.held_out()
    parts = [f"{key} " + " / ".join(f"{held_out[step][key]:.3f}" if key in held_out.get(step, {}) else "-"
                                    for step in run.steps) for key in keys]
    return f"{label}, held out during pre-training at steps {' / '.join(map(str, run.steps))}: " + "; ".join(parts)
