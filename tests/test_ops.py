"""The faster CPU layers in ops.py must compute exactly what PyTorch's own do."""

import pytest
import torch
import torch.nn.functional as F

from bertology.ops import Dropout, Linear, cross_entropy_with_accuracy, use_onednn


def test_fast_linear_matches_pytorch_forward_and_gradients():
    torch.manual_seed(7)
    layer = Linear(24, 40)
    reference = torch.nn.Linear(24, 40)
    reference.load_state_dict(layer.state_dict())
    x = torch.randn(3, 5, 24, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    assert use_onednn(x) == torch.backends.mkldnn.is_available()
    out, out_ref = layer(x), reference(x_ref)
    assert torch.allclose(out, out_ref, atol=1e-5)
    out.square().sum().backward()
    out_ref.square().sum().backward()
    assert torch.allclose(x.grad, x_ref.grad, atol=1e-4)
    assert torch.allclose(layer.weight.grad, reference.weight.grad, atol=1e-4)
    assert torch.allclose(layer.bias.grad, reference.bias.grad, atol=1e-4)


def test_fast_linear_leaves_bf16_autocast_to_pytorch():
    layer = Linear(16, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x = torch.randn(4, 16)
        assert not use_onednn(x)
        assert layer(x).dtype == torch.bfloat16


def test_dropout_keeps_the_right_share_and_scales():
    torch.manual_seed(0)
    layer = Dropout(0.1)
    x = torch.ones(400, 1000, requires_grad=True)
    y = layer(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.002
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.9))
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept)  # the gradient flows through the same mask
    layer.eval()
    assert torch.equal(layer(x), x)


def test_dropout_is_reproducible_under_a_seed():
    x = torch.ones(64, 64)
    torch.manual_seed(3)
    a = Dropout(0.2)(x)
    torch.manual_seed(3)
    b = Dropout(0.2)(x)
    assert torch.equal(a, b)


@pytest.mark.parametrize("chunk_rows", [64, 1000])  # 3 chunks, the last partial (a CPU's); one (a GPU's)
def test_chunked_cross_entropy_matches_pytorch(chunk_rows):
    torch.manual_seed(1)
    targets = torch.randint(0, 1000, (150,))
    for dtype, tolerance in ((torch.float32, 1e-6), (torch.bfloat16, 1e-2)):
        logits = (3 * torch.randn(150, 1000)).to(dtype).requires_grad_(True)
        loss, correct = cross_entropy_with_accuracy(logits, targets, chunk_rows=chunk_rows)
        (2 * loss).backward()
        ours = logits.grad.clone()
        logits.grad = None
        reference = F.cross_entropy(logits.float(), targets)
        (2 * reference).backward()
        assert abs(loss.item() - reference.item()) < 1e-5
        assert (ours.float() - logits.grad.float()).abs().max() < tolerance
        assert correct.item() == (logits.float().argmax(-1) == targets).sum().item()


def test_can_compile_asks_pytorch_for_a_compiler_and_takes_any_failure_as_no(monkeypatch):
    from torch._inductor import cpp_builder

    from bertology.ops import can_compile

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", lambda: "g++")
    assert can_compile(torch.device("cpu"))

    def no_compiler():
        raise RuntimeError("no working C++ compiler found")  # any error of the lookup means no

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    assert not can_compile(torch.device("cpu"))
