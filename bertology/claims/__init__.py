"""The papers' claims as experiments: `bertology reproduce CLAIM --out DIR`.

Each claim is one module here with `run(experiment) -> ClaimReport`: a short script over the
public API (pre-train, fine-tune over seeds, compare) whose shared steps live in
`experiment.py`. This registry lists the eleven claims in the order of the story, then the
summary (`families`: every model family built here on the same tasks); a claim whose script is
not written yet says so in `--list` and refuses to run, rather than run a stand-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from ..errors import UserError
from .experiment import Experiment, ReproduceConfig, open_reference, read_beside


@dataclass(frozen=True)
class Claim:
    """One claim: its number and name, what it measures, and its module (None: not written yet)."""

    number: int
    name: str
    title: str
    module: str | None
    unavailable: str | None = None  # why it cannot run yet
    # What it does with a model pre-trained elsewhere (--model; experiment.REFERENCE_NEEDS's names);
    # empty: it compares against none and refuses --model.
    model_needs: tuple[str, ...] = ()


CLAIMS = [
    Claim(1, "contextual-vs-static", "contextual vectors separate senses that static vectors merge (WiC, "
          "CoNLL-2003, SST-2 over static, CoVe, ELMo and BERT features)", "contextual_vs_static",
          model_needs=("features",)),
    Claim(2, "label-needs", "pre-training cuts the labels a task needs (ULMFiT's figure: SST-2 accuracy against "
          "100 to 10k labels)", "label_needs",
          model_needs=("sequence",)),
    Claim(3, "pretraining-task", "the masked LM beats left-to-right, NSP matters on some tasks (BERT's ablation "
          "table, with SOP, ELECTRA, XLNet and T5 beside)", "pretraining_task"),
    Claim(4, "directionality", "the masked LM converges more slowly than left-to-right but ends higher (downstream "
          "score against pre-training steps)", "directionality"),
    Claim(5, "model-size", "bigger models help even with 3,600 labels (tiny to medium, MRPC and SST-2)", "model_size"),
    Claim(6, "roberta", "RoBERTa's findings: dynamic masking, full sentences without NSP, more epochs", "roberta_findings"),
    Claim(7, "albert", "ALBERT shrinks parameters, not compute (factorised embeddings, shared layers)", "albert_savings"),
    Claim(8, "electra", "ELECTRA is more sample-efficient than the masked LM (downstream score against "
          "pre-training FLOPs)", "electra_efficiency"),
    Claim(9, "t5-objective", "T5's span length and corruption rate barely matter", "t5_objective"),
    Claim(10, "features-vs-finetuning", "feature extraction from the right layers comes close to fine-tuning "
          "(BERT's CoNLL-2003 table)", "features_vs_finetuning",
          model_needs=("features", "token")),
    Claim(11, "distillation", "distillation beats training the small model directly", "distillation",
          model_needs=("sequence", "teacher")),
    # the summary after the eleven claims: the project's own GLUE table
    Claim(12, "families", "summary: every family (static, CoVe, ELMo, ULMFiT, GPT, BERT, RoBERTa, ALBERT, ELECTRA, "
          "XLNet, T5, a distilled student) pre-trained on one corpus for the same minutes, on SST-2, MRPC, STS-B, "
          "CoNLL-2003, SQuAD and WiC", "families"),
]


def find_claim(name: str) -> Claim:
    """The claim named (or numbered) `name`; a one-line error listing the names otherwise."""
    for claim in CLAIMS:
        if name in (claim.name, str(claim.number)):
            return claim
    raise UserError(f"unknown claim {name!r}; choose one of {', '.join(c.name for c in CLAIMS)} "
                    "(bertology reproduce --list)")


def claim_list() -> str:
    """What `--list` prints: one line per claim, and why it cannot run when it cannot."""
    lines = []
    for claim in CLAIMS:
        status = f"  [unavailable: {claim.unavailable}]" if claim.module is None else ""
        model = "  [takes --model]" if claim.model_needs else ""
        lines.append(f"{claim.number:2d}. {claim.name:24} {claim.title}{model}{status}")
    return "\n".join(lines)


def run_claim(cfg: ReproduceConfig) -> dict:
    """Run one claim at the scale `cfg` asks for; writes and returns its results."""
    claim = find_claim(cfg.claim)
    if claim.module is None:
        raise UserError(f"claim {claim.name} is unavailable: {claim.unavailable}")
    if cfg.model and not claim.model_needs:
        raise UserError(f"--model {cfg.model}: claim {claim.name} compares against no model pre-trained elsewhere; "
                        "leave --model out (--list marks the claims that take it)")
    reference = open_reference(cfg.model, claim.name, claim.model_needs) if claim.model_needs else None
    beside = read_beside(cfg, claim.name) if cfg.beside else None  # a wrong file is an error now, not in hours
    experiment = Experiment.from_config(cfg, reference, beside)
    report = import_module(f"{__name__}.{claim.module}").run(experiment)
    return experiment.report(report)
