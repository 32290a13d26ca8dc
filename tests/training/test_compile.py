"""`--compile`: the compiled training step computes what the eager one does, and after its warm-up
it is never compiled again, however the batches come (their size, their length, how many tokens
are masked).

Dynamo's graph capture decides what is compiled and when it recompiles; its backend here is
aot_eager (the graph run by PyTorch's own kernels, with AOT autograd's backward), because
inductor's C++ build of each graph takes over a minute on this 2-core machine. bench/gpu.py
measures the inductor build on a GPU.
"""

import json

import pytest
import torch
from torch._dynamo.utils import counters

from bertology.models.bert import BertConfig
from bertology.training.loop import TrainConfig, Trainer
from bertology.training.objectives import build_objective

VOCAB = 60
STEPS = 20


def ragged_batch(step: int) -> dict[str, torch.Tensor]:
    """Step `step`'s batch: 3 to 5 rows of 9 to 16 tokens, [CLS]=2 first and [SEP]=3 last, the last
    row padded; sizes and contents drawn from the step, as a corpus's batches differ."""
    g = torch.Generator().manual_seed(step)
    rows, length = 3 + step % 3, 9 + (step * 5) % 8
    ids = torch.randint(5, VOCAB, (rows, length), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    mask = torch.ones_like(ids)
    mask[-1, -2:], ids[-1, -2:] = 0, 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
            "special_mask": ids < 5, "pair_labels": torch.randint(0, 2, (rows,), generator=g)}


def objective(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = BertConfig.from_preset("tiny", vocab_size=VOCAB, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)
    return build_objective(name, config, mask_token_id=4)


def run(name: str, out, compile: bool) -> tuple[list[float], list[int]]:
    """STEPS steps of objective `name` through Trainer.fit -> the logged losses, and after each step
    how many frames dynamo has compiled so far."""
    module = objective(name)
    compiled_frames = []

    def micro_batches(step):
        compiled_frames.append(counters["frames"]["total"])  # what the steps before this one compiled
        return [module.prepare(ragged_batch(step), torch.Generator().manual_seed(1000 + step))]

    config = TrainConfig(max_steps=STEPS, lr=1e-3, warmup=0, log_every=1, save_every=0, precision="fp32",
                         progress=False, compile=compile)
    assert Trainer(module, config, out, micro_batches).fit() == "completed"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if "split" not in row], compiled_frames[1:] + [counters["frames"]["total"]]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "electra"])
def test_compiled_training_agrees_with_eager_and_never_recompiles(name, tmp_path, aot_eager, capsys):
    eager, _ = run(name, tmp_path / "eager", compile=False)
    assert counters["frames"]["total"] == 0
    compiled, frames = run(name, tmp_path / "compiled", compile=True)
    assert len(compiled) == len(eager) == STEPS
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)  # fp32: the same arithmetic, reordered
    # One graph for the whole step from the first step on (ELECTRA: two, either side of its sampling,
    # which runs eagerly), never another, though every step's batch differs in size and masking.
    assert frames == [1 if name == "bert" else 2] * STEPS, frames
    assert "compiling took" in capsys.readouterr().err
