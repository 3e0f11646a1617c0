"""Linear layers through oneDNN, their weights packed once: the matmuls of a CPU engine.

In float32 on a CPU, `torch.nn.functional.linear` calls MKL's sgemm. On an AMD CPU with
AVX-512, the MKL inside torch 2.13 ran at AVX2-class rates; oneDNN, the other matrix
library inside PyTorch, runs AVX-512 kernels there, and with each weight reordered once,
at load, into the blocked layout its kernel reads, it multiplied faster from a few rows on.
On an AMD CPU with AVX2 only, where both run AVX2 kernels, oneDNN was slower at one row
and, from 4 rows on, within a quarter of MKL's time, on either side of it from run to run
(`benchmarks/profile_engine.py`'s Part 4 times both on every layer the engine runs):
nothing steady to gain there for a second copy of the weights. So the engine packs its
layers only where `onednn_faster`, on a CPU with AVX-512. vLLM's
CPU backend does this when it loads a model: ``dispatch_cpu_unquantized_gemm`` (in
``vllm/model_executor/layers/utils.py``) makes a oneDNN matmul of each linear layer's
weight (``create_onednn_mm``), and the layer's forward calls it (``onednn_mm``).

A oneDNN call costs more than MKL's (microseconds), with few rows it gains less, and
inside a compiled graph the product is a custom op whose dispatch costs more again. So a
product of fewer than `ONEDNN_MIN_ROWS` rows keeps `F.linear` (the threshold was chosen by
timing whole decode steps): the choice is made per call, by its rows.

`torch.compile` cannot trace a packed weight (an opaque oneDNN tensor), and inductor packs
weights only in frozen graphs, and for MKL; so inside a compiled graph the product is a
custom op, ``llmserve::onednn_linear``, which finds its layer's packed weight by the
layer's key.

`pack_linear_layers` replaces each ``nn.Linear`` of a model, in place, where
`onednn_available` (float32 on an x86-64 CPU) and `onednn_faster` (AVX-512), and leaves the
model as it is elsewhere; the engine does it to its own copy of the model, which shares the
model's weights (`llmserve_ref.engine.model_runner`), so ``generate`` keeps `F.linear`.

>>> import torch
>>> from torch import nn
>>> _ = torch.manual_seed(0)
>>> layer = nn.Linear(64, 32)
>>> packed = OneDNNLinear(layer)
>>> packed
OneDNNLinear(in_features=64, out_features=32, bias=True)
>>> packed.weight is layer.weight  # shared, not copied
True
>>> x = torch.randn(16, 64)  # 16 rows: oneDNN's product
>>> torch.allclose(packed(x), layer(x), atol=1e-5)
True
"""

from __future__ import annotations

import itertools
import platform
import weakref
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

Model = TypeVar("Model", bound=nn.Module)
ONEDNN_MIN_ROWS = 16  # fewer rows than this: MKL's sgemm, whose call is cheaper
# Each layer by its key, for the custom op; an entry goes when its layer does.
_LAYERS: weakref.WeakValueDictionary[int, OneDNNLinear] = weakref.WeakValueDictionary()
_KEYS = itertools.count()


def onednn_available(weight: torch.Tensor) -> bool:
    """Whether oneDNN runs products with this weight here: float32, on an x86-64 CPU (where
    it was measured; elsewhere `F.linear` stays), in a torch built with it."""
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and platform.machine().lower() in ("x86_64", "amd64")
        and torch.backends.mkldnn.is_available()
    )


def onednn_faster() -> bool:
    """Whether this CPU has AVX-512 (as torch reads it), where oneDNN's products were
    measured faster than MKL's from a few rows on; with AVX2 only, slower at one row and
    on either side of MKL's with more."""
    return torch.backends.cpu.get_cpu_capability().startswith("AVX512")


# --8<-- [start:layer]
class OneDNNLinear(nn.Module):
    """``x @ weight.T + bias`` with `weight` packed for oneDNN; the weight itself is kept
    too (shared with the layer it replaces) for the products of few rows, so a CPU holds
    the weights twice (vLLM, which runs every product through oneDNN, frees them)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias  # shared with `linear`
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach())
        self.key = next(_KEYS)
        _LAYERS[self.key] = self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() < ONEDNN_MIN_ROWS * x.shape[-1]:
            return F.linear(x, self.weight, self.bias)
        if torch.compiler.is_compiling():
            return onednn_linear(x, self.weight, self.bias, self.key)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        out, into = self.weight.shape
        return f"in_features={into}, out_features={out}, bias={self.bias is not None}"


# --8<-- [end:layer]


@torch.library.custom_op("llmserve::onednn_linear", mutates_args=())
def onednn_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, key: int
) -> torch.Tensor:
    """The product of layer `key`, for a compiled graph (`weight`: its shape, when traced)."""
    packed = _LAYERS[key].packed
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


@onednn_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, key: int) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def pack_linear_layers(model: Model) -> Model:
    """Replace each ``nn.Linear`` of `model` by a `OneDNNLinear` sharing its weights, in
    place, where oneDNN can run them all (not on CUDA, not in bfloat16) and is the faster
    library (a CPU with AVX-512); return `model`."""
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    if weights and onednn_faster() and all(onednn_available(w) for w in weights):
        for module in list(model.modules()):
            for name, child in module.named_children():
                if isinstance(child, nn.Linear):
                    setattr(module, name, OneDNNLinear(child))
    return model
