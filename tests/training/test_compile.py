"""`--compile`: the compiled training step computes what the eager one does, and after its warm-up
it is never compiled again, however the batches come (their size, their length, how much of them is
padding, how many tokens are masked), whether it compiles the repeated blocks (the default) or the
whole step.

Dynamo's graph capture decides what is compiled and when it recompiles; its backend here is
aot_eager (the graph run by PyTorch's own kernels, with AOT autograd's backward), because
inductor's C++ build of each graph takes over a minute on this 2-core machine. bench/gpu.py
measures the inductor build on a GPU.
"""

import json

import pytest
import torch
from torch._dynamo.utils import counters

from bertology.models import family_named
from bertology.models.base import compile_repeated_blocks
from bertology.models.bert import BertConfig
from bertology.training.loop import TrainConfig, Trainer
from bertology.training.objectives import build_objective

VOCAB = 60
STEPS = 20


def ragged_batch(step: int) -> dict[str, torch.Tensor]:
    """Step `step`'s batch: 3 to 5 rows of 9 to 16 tokens, [CLS]=2 first and [SEP]=3 last, the last
    row padded by 0, 2, 4 or 6 tokens (none: the eager model drops the all-ones mask; 10% or more:
    it unpads); sizes and contents drawn from the step, as a corpus's batches differ."""
    g = torch.Generator().manual_seed(step)
    rows, length, padding = 3 + step % 3, 9 + (step * 5) % 8, 2 * (step % 4)
    ids = torch.randint(5, VOCAB, (rows, length), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    mask = torch.ones_like(ids)
    mask[-1, length - padding:], ids[-1, length - padding:] = 0, 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
            "special_mask": ids < 5, "pair_labels": torch.randint(0, 2, (rows,), generator=g)}


def objective(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = BertConfig.from_preset("tiny", vocab_size=VOCAB, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)
    return build_objective(name, config, mask_token_id=4)


def run(name: str, out, compile: bool, scope: str = "blocks") -> tuple[list[float], list[int]]:
    """STEPS steps of objective `name` through Trainer.fit -> the logged losses, and after each step
    how many frames dynamo has compiled so far."""
    module = objective(name)
    compiled_frames = []

    def micro_batches(step):
        compiled_frames.append(counters["frames"]["total"])  # what the steps before this one compiled
        return [module.prepare(ragged_batch(step), torch.Generator().manual_seed(1000 + step))]

    config = TrainConfig(max_steps=STEPS, lr=1e-3, warmup=0, log_every=1, save_every=0, precision="fp32",
                         progress=False, compile=compile, compile_scope=scope)
    assert Trainer(module, config, out, micro_batches).fit() == "completed"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if "split" not in row], compiled_frames[1:] + [counters["frames"]["total"]]


# Graphs compiled in the first step, then never another. Blocks: one for every BertLayer of a stack;
# ELECTRA's generator is narrower than its discriminator (another graph), and its first layer takes a
# view (its embeddings' projection's output), which dynamo guards apart (a third). The whole step: one
# graph (ELECTRA: two, either side of its sampling, which runs eagerly).
GRAPHS = {("bert", "blocks"): 1, ("electra", "blocks"): 3, ("bert", "model"): 1, ("electra", "model"): 2}


@pytest.mark.slow
@pytest.mark.parametrize("name, scope", sorted(GRAPHS))
def test_compiled_training_agrees_with_eager_and_never_recompiles(name, scope, tmp_path, aot_eager, capsys):
    eager, _ = run(name, tmp_path / "eager", compile=False)
    assert counters["frames"]["total"] == 0
    compiled, frames = run(name, tmp_path / "compiled", compile=True, scope=scope)
    assert len(compiled) == len(eager) == STEPS
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)  # fp32: the same arithmetic, reordered
    assert frames == [GRAPHS[name, scope]] * STEPS, frames
    assert "compiling took" in capsys.readouterr().err


def test_compiling_blocks_keeps_the_checkpoint_names_and_every_padding_decision_fixed(aot_eager):
    module = objective("bert")
    names = list(module.state_dict())
    assert compile_repeated_blocks(module)
    assert list(module.state_dict()) == names  # compiled in place: saved under the same names, no wrapper
    bert = module.model.bert
    assert bert.blocks_compiled and all(layer._compiled_call_impl is not None for layer in bert.layers)
    # The blocks get the same kind of mask for every batch: kept when all ones, never unpadded.
    full = torch.ones(2, 8, dtype=torch.long)
    assert bert.attention_mask(full, 8, full.device) is not None
    assert not compile_repeated_blocks(torch.nn.Linear(2, 2))  # nothing repeated: the caller compiles it whole


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt", "t5", "xlnet"])
def test_compiled_blocks_of_every_stack_give_the_eager_losses_and_gradients(family, aot_eager):
    """The other families' repeated blocks (GPT's, T5's encoder and decoder blocks, XLNet's two-stream
    layers), compiled in place: the same loss and gradients as eagerly, each family trained by its own
    default objective (its spec's) on padded batches, and no graph compiled again for a batch of another
    size. In eval mode, so that dropout draws nothing and the two runs do the same arithmetic."""
    spec = family_named(family).spec
    torch.manual_seed(0)
    # the top ids stand for sentinels (<extra_id_N>), which span corruption needs and the others ignore
    module = build_objective(spec.objectives[0], spec.config_class.from_preset("tiny", vocab_size=VOCAB),
                             mask_token_id=4, sentinel_ids=list(range(VOCAB - 10, VOCAB))).eval()

    def loss_and_grads(step):
        out = module(module.prepare(ragged_batch(step), torch.Generator().manual_seed(1000 + step)))
        module.zero_grad()
        out.loss.backward()
        return out.loss.detach(), [p.grad.clone() for p in module.parameters() if p.grad is not None]

    eager = [loss_and_grads(step) for step in (1, 2)]
    assert compile_repeated_blocks(module, dynamic=True)
    compiled = [loss_and_grads(step) for step in (1, 2)]
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)
    graphs = counters["frames"]["total"]
    assert graphs >= 1
    loss_and_grads(4)  # another size and padding
    assert counters["frames"]["total"] == graphs


def test_compile_without_a_compiler_is_a_one_line_error_before_any_step(tmp_path, monkeypatch):
    from bertology.errors import UserError

    monkeypatch.setattr("bertology.training.loop.can_compile", lambda device: False)
    objective = build_objective("roberta", BertConfig.from_preset("tiny", vocab_size=100), mask_token_id=4)
    with pytest.raises(UserError, match="--compile: PyTorch finds no compiler here"):
        Trainer(objective, TrainConfig(max_steps=1, compile=True, progress=False), tmp_path, lambda step: [])

