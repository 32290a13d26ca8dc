"""Low-level pieces every layer above shares: fast CPU kernels, the chunked LM loss, and precision.

Faster CPU versions of two layers: the fp32 linear layer (through oneDNN) and dropout.

On the processors we measured (AMD EPYC, AVX-512), PyTorch's default fp32 matrix
product (MKL) reaches about 100-200 GFLOP/s on two cores, while the oneDNN kernel
behind `torch.ops.mkldnn._linear_pointwise` reaches about 400-440: a 2x speed-up
of the layer that holds almost all of BERT's arithmetic. The backward pass is
two more products of the same kind, so training gets it too.

`Linear` is a drop-in `nn.Linear` (same parameters, same state-dict keys) that
takes this path for fp32 CPU tensors and `torch.nn.functional.linear` for
everything else (CUDA, bf16 autocast, other dtypes), where PyTorch's own kernels
are already the fast ones. `Dropout` likewise replaces `nn.Dropout` on the CPU,
whose per-element Bernoulli sampling costs more than the layers around it.
`cross_entropy_with_accuracy` scores a language model's (N, V) logits in cache-sized
chunks. `resolve_precision` and `autocast` choose and apply fp32 or bf16 for training and
inference alike; `IGNORE_INDEX` marks label positions that carry no loss.
`resolve_device` reads the `--device` setting.
`relative_position_bucket` is T5's bucketing of query-key distances, which T5 and BERT's
relative positions share. `Unpadding` packs a padded batch's real tokens so that an encoder computes
on them alone (MosaicBERT's unpadding).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .errors import UserError

IGNORE_INDEX = -100  # label value for positions that carry no loss (transformers' convention)

_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _OneDnnLinearFunction(torch.autograd.Function):
    """y = x W^T + b, with the forward and both backward products on oneDNN."""

    @staticmethod
    def forward(ctx, x, weight, bias):  # noqa: D102 - torch.autograd.Function protocol
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _onednn_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):  # noqa: D102
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        grad_2d = grad_out.reshape(-1, grad_out.shape[-1])  # (N, out)
        if ctx.needs_input_grad[0]:
            grad_x = _onednn_linear(grad_out, weight.t(), None)  # (..., in) = grad W
        if ctx.needs_input_grad[1]:
            grad_w = _onednn_linear(grad_2d.t(), x.reshape(-1, x.shape[-1]).t(), None)  # (out, in)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad_2d.sum(0)
        return grad_x, grad_w, grad_b


def use_onednn(x: torch.Tensor) -> bool:
    """Whether `linear` would route `x` through the oneDNN fp32 kernel."""
    return (
        _ONEDNN
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and not torch.jit.is_tracing()
        and not torch.compiler.is_compiling()
    )


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`, through oneDNN for fp32 CPU tensors (see module docstring)."""
    if not use_onednn(x) or weight.dtype != torch.float32:
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return _OneDnnLinearFunction.apply(x, weight, bias)
    return _onednn_linear(x, weight, bias)


class Linear(nn.Linear):
    """`nn.Linear` whose forward uses `linear` above; parameters and keys are unchanged."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return linear(x, self.weight, self.bias)


def _keep_mask(x: torch.Tensor, p: float) -> torch.Tensor:
    """Bool mask, True with probability 1 - p, from 15 random bits per element.

    PyTorch's CPU dropout draws one Bernoulli sample per element, which costs more than the
    layer's arithmetic; one int64 draw gives four 16-bit chunks instead. `random_()` on int64
    leaves the top bit 0, so only the low 15 bits of each chunk are used.
    """
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_()
    chunks = words.view(torch.int16)[:n].view(x.shape)
    return (chunks & 0x7FFF) >= round(p * 32768)


class _DropoutFunction(torch.autograd.Function):
    """Inverted dropout that keeps its mask (1 byte per element) for the backward pass."""

    @staticmethod
    def forward(ctx, x, p):  # noqa: D102
        keep = _keep_mask(x, p)
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return x * keep * ctx.scale

    @staticmethod
    def backward(ctx, grad_out):  # noqa: D102
        (keep,) = ctx.saved_tensors
        return grad_out * keep * ctx.scale, None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """`F.dropout`, with a faster mask on the CPU (see `_keep_mask`)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or torch.compiler.is_compiling():  # the compiler fuses F.dropout's mask itself
        return F.dropout(x, p, True)
    return _DropoutFunction.apply(x, p)


class Dropout(nn.Dropout):
    """`nn.Dropout` whose forward uses `dropout` above."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return dropout(x, self.p, self.training)


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy whose gradient (softmax - one-hot) is computed in the forward pass, in row chunks."""

    @staticmethod
    def forward(ctx, logits, targets, chunk_rows):  # noqa: D102
        n = logits.shape[0]
        grad = torch.empty_like(logits)
        loss_sum = torch.zeros((), dtype=torch.float64, device=logits.device)
        correct = torch.zeros((), dtype=torch.long, device=logits.device)
        for start in range(0, n, chunk_rows):
            block = logits[start:start + chunk_rows].to(torch.float32, copy=True)  # (c, V), modified below
            target = targets[start:start + chunk_rows]
            rows = torch.arange(block.shape[0], device=block.device)
            lse = block.logsumexp(dim=-1)  # (c,)
            loss_sum += (lse - block[rows, target]).sum()
            correct += (block.argmax(dim=-1) == target).sum()
            block.sub_(lse[:, None]).exp_()  # softmax, in place
            block[rows, target] -= 1.0
            grad[start:start + chunk_rows] = block
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(correct)
        return (loss_sum / max(n, 1)).float(), correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):  # noqa: D102
        (grad,) = ctx.saved_tensors  # used once, so it can be scaled in place
        return grad.mul_((grad_loss / max(grad.shape[0], 1)).to(grad.dtype)), None, None


# Rows of fp32 logits a chunk of `cross_entropy_with_accuracy` holds: on the CPU few enough to stay in
# cache; on a GPU, where every chunk costs a dozen kernel launches, as many as 512 MiB hold (a BERT
# pre-training batch of 128 x 128 tokens masks about 2,500 positions: one chunk at BERT's 30,522 pieces).
CPU_CHUNK_ROWS = 64
DEVICE_CHUNK_BYTES = 512 << 20


def cross_entropy_with_accuracy(logits: torch.Tensor, targets: torch.Tensor,
                                chunk_rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy of (N, V) logits against (N,) targets, and how many argmaxes hit.

    The same loss as `F.cross_entropy`, computed for the large (positions x vocabulary)
    products of language-model heads: the rows are processed in chunks (`chunk_rows`; by
    default small enough to stay in a CPU's cache, large on a GPU), in fp32 whatever the logits'
    dtype, and the gradient is formed in the same pass, so no more than a chunk of fp32
    log-probabilities is ever held. Under torch.compile, F.cross_entropy, which the compiler fuses as well and
    traces for any N (the chunk loop's trip count would be fixed into the graph).
    """
    if torch.compiler.is_compiling():
        correct = (logits.argmax(dim=-1) == targets).sum()
        return F.cross_entropy(logits.float(), targets), correct
    if chunk_rows is None:
        chunk_rows = CPU_CHUNK_ROWS if logits.device.type == "cpu" else max(
            1, DEVICE_CHUNK_BYTES // (4 * logits.shape[-1]))
    return _ChunkedCrossEntropy.apply(logits, targets, chunk_rows)


def position_ids_for(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions (B, S) counted from each sequence's first real token (`attention_mask` (B, S),
    1 = real), so that a left-padded prompt gets the positions it would have alone; what
    transformers' generate passes as position_ids."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


# ----- device --------------------------------------------------------------------------------


def resolve_device(requested: str | torch.device | None = "auto") -> torch.device:
    """Where a model computes, from a `--device` setting (config.py's `Device`): "auto" (or None)
    is the GPU when PyTorch sees one, else the CPU; "cpu", "cuda" (or "cuda:1") are themselves, and
    a torch.device passes through.

    Raises:
        UserError: "cuda" where PyTorch sees no GPU (one line, before any work is done).
    """
    if isinstance(requested, torch.device):
        return requested
    if requested in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)  # "cpu", "cuda", or "cuda:1" from Python
    if device.type == "cuda" and not torch.cuda.is_available():
        why = "this PyTorch is built for the CPU only" if torch.version.cuda is None else "no GPU is visible"
        raise UserError(f"--device {requested}: PyTorch sees no CUDA device ({why}); use --device cpu or auto")
    return device


# ----- precision -----------------------------------------------------------------------------

PRECISIONS = ("auto", "fp32", "bf16")


def bf16_is_fast(device: torch.device) -> bool:
    """Whether bf16 matrix products run natively (CUDA Ampere+, or CPUs with AVX512-BF16/AMX)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def can_compile(device: torch.device) -> bool:
    """Whether torch.compile can build kernels for `device` here: Triton for a GPU; a C++ compiler
    (g++ or clang; cl on Windows) for the CPU, which a laptop may lack."""
    try:
        if device.type == "cuda":
            from torch.utils._triton import has_triton

            return has_triton()
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()  # raises when no compiler is found
        return True
    except Exception:  # noqa: BLE001 - PyTorch's private lookups: any failure of theirs means no
        return False


def resolve_precision(precision: str, device: torch.device) -> str:
    """'auto' -> 'bf16' where it is fast, else 'fp32'."""
    if precision == "auto":
        return "bf16" if bf16_is_fast(device) else "fp32"
    return precision


PRECISION_HELP = ("auto: bf16 where the device runs it fast, else fp32; a model that computes in one precision only "
                  "(an int8 or ONNX export, a T5 writing text, a head over word vectors) takes that one and refuses "
                  "the other")


def run_precision(requested: str, device: torch.device, fixed: str | None = None, why: str = "") -> str:
    """The one precision policy: "auto" is bf16 where `device` runs it fast, else fp32; a model that
    computes in one precision only (`fixed`, for the reason `why`) takes that one for "auto" and
    refuses the other with a one-line error."""
    if fixed is None:
        return resolve_precision(requested, device)
    if requested not in ("auto", fixed):
        raise UserError(f"--precision {requested}: this model computes in {fixed} only ({why}); use auto or {fixed}")
    return fixed


def autocast(precision: str, device: torch.device):
    """The autocast context for a resolved precision (a no-op for fp32)."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def span_loss(start_logits: torch.Tensor, end_logits: torch.Tensor, start_positions: torch.Tensor,
              end_positions: torch.Tensor) -> torch.Tensor:
    """The extractive-QA loss: the mean of the start and the end cross-entropies over each row's
    positions, start_logits and end_logits (B, T), gold positions (B,); a gold position past the
    row (>= T) carries no loss, as transformers' question-answering heads do."""
    length = start_logits.shape[1]
    start, end = start_positions.view(-1).clamp(0, length), end_positions.view(-1).clamp(0, length)
    return (F.cross_entropy(start_logits.float(), start, ignore_index=length)
            + F.cross_entropy(end_logits.float(), end, ignore_index=length)) / 2


def last_token_states(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Each row's last real token's vector (B, H) from hidden (B, T, H) and a right-padded
    attention_mask (B, T) (None: no padding): under a causal mask, the one vector that has
    read the whole input (GPT's classification head reads it)."""
    if attention_mask is None:
        return hidden[:, -1]
    last = attention_mask.long().sum(1) - 1
    return hidden[torch.arange(len(hidden), device=hidden.device), last]


def relative_position_bucket(relative_position: torch.Tensor, bidirectional: bool, num_buckets: int,
                             max_distance: int) -> torch.Tensor:
    """The bucket of each relative distance (key position - query position), any shape: T5's
    relative positions (models/t5.py), also BERT's `position_embedding_type="relative"`.

    Bidirectional: half the buckets for keys after the query. Of each half, the first half
    are exact distances 0, 1, ...; the rest cover up to `max_distance` logarithmically, and
    anything further falls in the last bucket. Causal: keys after the query all map to 0."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    # The float division before the log and the truncation toward zero are the reference's (Mesh TensorFlow).
    logarithmic = max_exact + (torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
                               * (num_buckets - max_exact)).long()
    logarithmic = logarithmic.clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, logarithmic)


# ----- unpadding -----------------------------------------------------------------------------

def _varlen_attn(*args, **kwargs) -> torch.Tensor:
    """PyTorch's variable-length FlashAttention (CUDA), imported on first use: the module loads
    torch._dynamo, which every command would otherwise pay for at start-up."""
    from torch.nn.attention.varlen import varlen_attn

    return varlen_attn(*args, **kwargs)


def _has_varlen_attn() -> bool:
    try:
        import torch.nn.attention.varlen  # noqa: F401 - torch >= 2.10
    except ImportError:  # pragma: no cover - older torch: every device takes the padded form
        return False
    return True


@dataclass(frozen=True)
class Unpadding:
    """Where a padded batch's real tokens are, so that an encoder computes on them alone.

    A batch of texts of mixed lengths padded to its longest spends the linear layers' and the
    attention's arithmetic on padding; MosaicBERT packs the real tokens of every row into one
    (N, H) tensor instead, runs the linear layers, LayerNorms and dropout on that, and attends
    within each row's span (`attend`, or padded back around the attention alone where no
    variable-length kernel runs). Every real token's output equals the padded computation's;
    the padding positions come back as zeros (`pad`), which nothing downstream reads (losses,
    poolers and heads all skip them through the attention mask).

    Attributes:
        indices: (N,) flat positions (row * T + column) of the real tokens, row by row.
        cu_seqlens: (B + 1,) int32 offsets of each row's first token in the packed tensors.
        max_len: the most real tokens in a row.
        shape: (B, T) of the padded batch.
        mask: bool (B, 1, 1|T, T), True = may attend: the padded form's attention mask, for the
            devices without a variable-length kernel.
        causal: whether each token attends only to the real tokens before it.
    """

    indices: torch.Tensor
    cu_seqlens: torch.Tensor
    max_len: int
    shape: tuple[int, int]
    mask: torch.Tensor
    causal: bool = False

    @classmethod
    def of(cls, attention_mask: torch.Tensor, mask: torch.Tensor, causal: bool = False) -> Unpadding:
        """From attention_mask (B, T), 1 = real token (any positions: left, right or inner padding),
        and the bool attention mask (B, 1, 1|T, T) the padded form would use."""
        real = attention_mask.bool()
        lengths = real.sum(1, dtype=torch.int32)  # (B,)
        cu_seqlens = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
        indices = real.flatten().nonzero().squeeze(1)
        return cls(indices, cu_seqlens, int(lengths.max()), tuple(real.shape), mask, causal)

    # Packing and padding back around the attention cost about what 8% padding costs: measured on the
    # CPU, a mini and a small BERT's training step ran 0.95-0.97x as fast unpadded at 3% padding and
    # 1.02-1.07x at 15%; inference at WikiText-2's mixed lengths, 1.4x.
    MIN_PADDING = 0.1

    @staticmethod
    def applies(attention_mask: torch.Tensor | None) -> bool:
        """Whether to unpad a batch with this attention_mask (B, T): when at least `MIN_PADDING` of
        it is padding, and outside tracing and compilation (the packed length depends on the data)."""
        if attention_mask is None or torch.jit.is_tracing() or torch.compiler.is_compiling():
            return False
        if torch.onnx.is_in_onnx_export():
            return False
        return float(attention_mask.float().mean()) <= 1 - Unpadding.MIN_PADDING

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...): the real tokens' rows, in order."""
        return x.flatten(0, 1).index_select(0, self.indices)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...), zeros at the padding positions."""
        padded = x.new_zeros((self.shape[0] * self.shape[1],) + tuple(x.shape[1:]))
        return padded.index_copy(0, self.indices, x).view(*self.shape, *x.shape[1:])

    def has_kernel(self, x: torch.Tensor, dropout_p: float) -> bool:
        """Whether `attend` can take packed tensors like `x` as they are: PyTorch's variable-length
        FlashAttention, on CUDA in half precision without attention dropout (which it lacks).
        Elsewhere the caller pads the queries, keys and values back around its usual attention,
        which still saves the linear layers' work on the padding."""
        return (x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) and dropout_p == 0.0
                and _has_varlen_attn())

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention within each row's real tokens (where `has_kernel`): q, k, v (N, heads, head
        size) -> (N, heads, head size)."""
        return _varlen_attn(q.contiguous(), k.contiguous(), v.contiguous(), self.cu_seqlens, self.cu_seqlens,
                            self.max_len, self.max_len, window_size=(-1, 0) if self.causal else (-1, -1))
