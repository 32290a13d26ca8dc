"""On a CUDA device: the LSTM families' weights as cuDNN really lays them out (views into one flat
buffer, made by nn.LSTM.flatten_parameters on the GPU) are saved exactly and load back, as a model
directory and as a training checkpoint. Skipped, saying why, where PyTorch sees no GPU; the CPU
tests in test_checkpoint.py build the same layout by hand."""

import pytest
import torch
from test_checkpoint import OUTPUT_OF_IDS, tiny_of_every_family

from bertology.checkpoint import load_module_state, save_module_state
from bertology.models.base import load_pretrained

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (PyTorch sees none)")


@pytest.mark.parametrize("family", ["elmo", "awd-lstm", "bert-bilstm-head", "cove"])
def test_cudnn_flat_lstm_weights_are_saved_exactly(family, tmp_path):
    build = tiny_of_every_family()[family]
    torch.manual_seed(0)
    model = build().cuda()
    lstms = [m for m in model.modules() if isinstance(m, torch.nn.LSTM)]
    for lstm in lstms:
        lstm.flatten_parameters()
    storages = {p.untyped_storage().data_ptr() for lstm in lstms for p in lstm.parameters()}
    assert len(storages) < sum(1 for lstm in lstms for _ in lstm.parameters())  # cuDNN's shared buffers
    state = {k: v.cpu() for k, v in model.state_dict().items()}
    model.save_pretrained(tmp_path / "model")
    loaded = load_pretrained(tmp_path / "model")
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in state.items())
    save_module_state(model, tmp_path / "module.safetensors")
    fresh = build().cuda()
    load_module_state(fresh, tmp_path / "module.safetensors", "cuda")
    assert all(torch.equal(fresh.state_dict()[k].cpu(), v) for k, v in state.items())
    if family in OUTPUT_OF_IDS:
        ids = torch.randint(4, 20, (2, 7), generator=torch.Generator().manual_seed(2)).cuda()
        with torch.no_grad():
            output = OUTPUT_OF_IDS[family]
            torch.testing.assert_close(output(fresh.eval(), ids), output(model.eval(), ids))


class _Batches:
    """Seeded regression batches (x (8, 4), y (8,)), a pure function of the step."""

    def __init__(self, prefetchable: bool):
        self.prefetchable = prefetchable

    def __call__(self, step):
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step))
        return [{"x": x, "y": x.sum(1), "attention_mask": torch.ones(8, 1)}]


class _Regression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, batch):
        from bertology.training.loop import StepOutput

        return StepOutput((self.linear(batch["x"]).squeeze(-1) - batch["y"]).square().mean(), {})


def test_pretraining_batches_come_prepared_ahead_in_pinned_memory(tmp_path):
    """On a GPU the loop takes prefetchable batches from the prefetch thread, in pinned memory, and
    trains exactly as without it."""
    import json

    from bertology.training.loop import TrainConfig, Trainer

    losses = []
    for prefetch in (True, False):
        torch.manual_seed(0)
        config = TrainConfig(lr=0.05, max_steps=6, log_every=1, progress=False, precision="fp32", device="cuda")
        trainer = Trainer(_Regression(), config, tmp_path / str(prefetch), _Batches(prefetch))
        assert (trainer.prefetcher is not None) == prefetch
        if prefetch:
            assert all(t.is_pinned() for t in trainer.prefetcher(0)[0].values())
            trainer.prefetcher.close()
        trainer.fit()
        rows = (tmp_path / str(prefetch) / "metrics.jsonl").read_text().splitlines()
        losses.append([json.loads(row)["loss"] for row in rows if "split" not in json.loads(row)])
    assert losses[0] == losses[1] and len(losses[0]) == 6


def test_compiled_generation_replays_one_cuda_graph_and_gives_the_eager_ids():
    """generate --compile on the GPU: the decode step compiled once (inductor, reduce-overhead) and
    captured as a CUDA graph, none skipped (the static cache's buffers are static addresses, so that
    writing them in place does not make inductor give up the graph); greedy ids those of eager decoding."""
    from torch._dynamo.utils import counters

    from bertology.inference.generation import GenerationConfig, generate
    from bertology.models.gpt import GPTConfig, GPTLMHeadModel

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = GPTLMHeadModel(GPTConfig(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                     pre_layer_norm=True, initializer_range=0.3)).cuda().eval()
    ids = torch.randint(1, 99, (2, 9), generator=torch.Generator().manual_seed(1)).cuda()
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0
    eager = generate(model, ids, mask, GenerationConfig(max_new_tokens=30, cache_implementation="dynamic"))
    for _ in range(2):  # the second call replays what the first compiled and captured
        assert torch.equal(generate(model, ids, mask, GenerationConfig(max_new_tokens=30, compile=True)), eager)
    assert counters["stats"]["unique_graphs"] == 1 and counters["inductor"]["cudagraph_skips"] == 0
    torch._dynamo.reset()


def test_masked_lm_loss_on_the_gpu_is_one_chunk_and_equals_pytorch():
    """A BERT pre-training batch's masked positions (about 2,500 at 128 x 128) fit one chunk of
    cross_entropy_with_accuracy on a GPU; the loss and gradient are F.cross_entropy's."""
    import torch.nn.functional as F

    from bertology.ops import CPU_CHUNK_ROWS, DEVICE_CHUNK_BYTES, cross_entropy_with_accuracy

    assert DEVICE_CHUNK_BYTES // (4 * 30522) >= 2500 > CPU_CHUNK_ROWS
    torch.manual_seed(0)
    targets = torch.randint(0, 30522, (2500,), device="cuda")
    logits = (3 * torch.randn(2500, 30522, device="cuda")).bfloat16().requires_grad_(True)
    loss, correct = cross_entropy_with_accuracy(logits, targets)
    loss.backward()
    ours, logits.grad = logits.grad.float(), None
    reference = F.cross_entropy(logits.float(), targets)
    reference.backward()
    assert abs(loss.item() - reference.item()) < 1e-4
    assert (ours - logits.grad.float()).abs().max() < 1e-2
    assert correct.item() == (logits.float().argmax(-1) == targets).sum().item()
