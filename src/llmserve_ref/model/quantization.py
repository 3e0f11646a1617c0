"""Quantization: store weights and the KV cache in fewer bits, and compute with them.

Decode reads every weight once per step, so its speed is bytes ÷ bandwidth (see
`llmserve_ref.planning.roofline`): fewer bytes per weight is more tokens per second, if
the extra work of turning the small integers back into numbers stays cheap.

- **int8, per output channel, symmetric**: each row of a weight matrix gets one
  scale, amax(|row|) / 127, and stores round(w / scale) in [-127, 127].
- **int4, group-wise, symmetric**: each group of `group_size` consecutive inputs
  of a row gets its own scale, amax / 7, and values in [-8, 7], packed two per
  byte (low nibble first). Small groups follow outliers more closely and cost
  more scales: 16 bits of scale per group of 32 adds half a bit per weight.
- **KV cache**: int8 with one scale per token and head (the vector that is
  written together), or fp8 e4m3 with one scale per tensor. fp8 has two e4m3
  variants: OCP's `float8_e4m3fn` (NVIDIA, max 448) and `float8_e4m3fnuz` (AMD
  MI300, max 240). A plain cast past the maximum is not to be trusted (in torch
  2.13 it gives NaN for e4m3fnuz and saturates for e4m3fn), so values are
  clamped to the format's range first.

Everything is plain PyTorch, so it runs on every device; the packed int4 layout
is this module's own (PyTorch's private int4 matmul ops change layout between
versions and are missing on the CPU).

>>> w = torch.randn(4, 64)
>>> q, scale = quantize_int8(w)
>>> q.dtype, scale.shape, bool((dequantize_int8(q, scale) - w).abs().max() <= scale.max() / 2)
(torch.int8, torch.Size([4]), True)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from llmserve_ref.model.kv_cache import KVCache

FP8_FORMATS = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz}


# --8<-- [start:int8]
def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 weights and one float32 scale per row (output channel) of `w` [out, in]."""
    scale = w.float().abs().amax(dim=1).clamp(min=1e-12) / 127
    q = torch.round(w.float() / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale[:, None]


# --8<-- [end:int8]


# --8<-- [start:int4]
def quantize_int4(w: torch.Tensor, group_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed int4 weights (uint8 [out, in/2]) and float32 scales [out, in/group_size].

    >>> packed, scales = quantize_int4(torch.randn(8, 64), group_size=32)
    >>> packed.shape, packed.dtype, scales.shape
    (torch.Size([8, 32]), torch.uint8, torch.Size([8, 2]))
    """
    out_features, in_features = w.shape
    if group_size % 2 or in_features % group_size:
        raise ValueError(
            f"group_size {group_size} must be even and divide the {in_features} input "
            "features; pick a divisor such as 32, 64 or 128"
        )
    groups = w.float().reshape(out_features, in_features // group_size, group_size)
    scales = groups.abs().amax(dim=2).clamp(min=1e-12) / 7
    q = torch.round(groups / scales[..., None]).clamp(-8, 7).to(torch.int8)
    q = q.reshape(out_features, in_features).to(torch.uint8) & 0xF  # two's complement nibbles
    return q[:, 0::2] | (q[:, 1::2] << 4), scales


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """int8 values in [-8, 7], two per byte of `packed`, low nibble first."""
    nibbles = torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2).to(torch.int8)
    return (nibbles ^ 8) - 8  # sign-extend: 8..15 become -8..-1


def dequantize_int4(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    q = unpack_int4(packed).float()
    out_features, in_features = q.shape
    groups = q.reshape(out_features, scales.shape[1], -1) * scales[..., None]
    return groups.reshape(out_features, in_features)


# --8<-- [end:int4]


# --8<-- [start:linear]
class QuantizedLinear(nn.Module):
    """A bias-free `nn.Linear` whose weight is stored in int8 or packed int4.

    `forward` dequantizes the weight to the input's dtype, then multiplies: the
    bytes read from memory shrink, the matmul is the usual one. With
    `fused=True` (int8 on the CPU only) PyTorch's `_weight_int8pack_mm` does
    both in one kernel, never materializing the float weight.
    """

    q: torch.Tensor  # the quantized weight and its scales (buffers)
    scale: torch.Tensor
    bits: int
    fused: bool
    in_features: int
    out_features: int

    def __init__(self, linear: nn.Linear, bits: int, group_size: int = 32, fused: bool = False):
        super().__init__()
        if linear.bias is not None:
            raise ValueError("QuantizedLinear handles bias-free layers, as in Llama")
        if bits not in (8, 4):
            raise ValueError(f"bits must be 8 or 4, got {bits}")
        if fused and (bits != 8 or linear.weight.device.type != "cpu"):
            raise ValueError("the fused kernel (_weight_int8pack_mm) is int8 on the CPU only")
        self.bits, self.fused = bits, fused
        self.in_features, self.out_features = linear.in_features, linear.out_features
        quantize = quantize_int8 if bits == 8 else lambda w: quantize_int4(w, group_size)
        q, scale = quantize(linear.weight.detach())
        self.register_buffer("q", q)
        self.register_buffer("scale", scale)

    def dequantized_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        deq = dequantize_int8 if self.bits == 8 else dequantize_int4
        return deq(self.q, self.scale).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            flat = x.reshape(-1, self.in_features)
            out = torch.ops.aten._weight_int8pack_mm(flat, self.q, self.scale.to(x.dtype))
            return out.reshape(*x.shape[:-1], self.out_features)
        return F.linear(x, self.dequantized_weight(x.dtype))


def quantize_linears(
    model: nn.Module, bits: int, group_size: int = 32, fused: bool = False
) -> nn.Module:
    """Replace every bias-free `nn.Linear` except the output head, in place; return `model`.

    The output head (`lm_head`) stays in full precision, as GPTQ and AWQ leave
    it: in a model with tied embeddings it is the embedding table too.
    """
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if isinstance(child, nn.Linear) and full != "lm_head":
                setattr(module, child_name, QuantizedLinear(child, bits, group_size, fused))
    return model


# --8<-- [end:linear]


def model_bytes(model: nn.Module) -> int:
    """Bytes of every distinct parameter and buffer that is saved with the model."""
    tensors = {id(t): t for t in model.state_dict(keep_vars=True).values()}
    return sum(t.numel() * t.element_size() for t in tensors.values())


# --8<-- [start:kv]
def quantize_fp8(
    x: torch.Tensor, fmt: str = "e4m3fn", scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 values and the per-tensor scale that maps amax(|x|) to the format's maximum.

    >>> q, s = quantize_fp8(torch.tensor([1000.0, -1.0]), "e4m3fnuz", scale=torch.tensor(1.0))
    >>> q.float().tolist()  # clamped to ±240, never NaN
    [240.0, -1.0]
    """
    dtype = FP8_FORMATS[fmt]
    fmax = torch.finfo(dtype).max
    if scale is None:
        scale = x.float().abs().amax().clamp(min=1e-12) / fmax
    return (x.float() / scale).clamp(-fmax, fmax).to(dtype), scale


def dequantize_fp8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale


def quantize_kv_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 K or V `x` [..., head_dim] with one scale per token and head (amax / 127)."""
    scale = x.float().abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 127
    return torch.round(x.float() / scale).clamp(-127, 127).to(torch.int8), scale


class QuantizedKVCache(KVCache):
    """A `KVCache` that stores K and V in int8 (per token and head) or fp8 (per layer).

    Attention still runs in the model's dtype: `update` quantizes the new K and
    V into storage and returns everything stored so far, dequantized.
    """

    def __init__(self, model_cache: KVCache, kv_format: str = "int8") -> None:
        if kv_format != "int8" and kv_format not in FP8_FORMATS:
            raise ValueError(f"kv_format is 'int8' or one of {', '.join(FP8_FORMATS)}")
        self.kv_format, self.max_len, self.length = kv_format, model_cache.max_len, 0
        self.dtype = model_cache.keys[0].dtype
        shape = model_cache.keys[0].shape
        storage = torch.int8 if kv_format == "int8" else FP8_FORMATS[kv_format]
        device = model_cache.keys[0].device
        self.keys = [torch.zeros(shape, dtype=storage, device=device) for _ in model_cache.keys]
        self.values = [torch.zeros(shape, dtype=storage, device=device) for _ in model_cache.keys]
        scale_shape = (*shape[:-1], 1) if kv_format == "int8" else ()
        self.key_scales = [torch.ones(scale_shape, device=device) for _ in model_cache.keys]
        self.value_scales = [torch.ones(scale_shape, device=device) for _ in model_cache.keys]

    @property
    def nbytes(self) -> int:
        tensors = self.keys + self.values + self.key_scales + self.value_scales
        return sum(t.numel() * t.element_size() for t in tensors)

    def _store(self, data, scales, layer, x, start, end) -> torch.Tensor:
        if self.kv_format == "int8":
            q, s = quantize_kv_int8(x)
            data[layer][:, :, start:end], scales[layer][:, :, start:end] = q, s
            return data[layer][:, :, :end].float() * scales[layer][:, :, :end]
        if start == 0:  # fp8: the first write of a layer fixes its scale, as vLLM's does
            scales[layer] = (
                x.float().abs().amax().clamp(min=1e-12)
                / torch.finfo(FP8_FORMATS[self.kv_format]).max
            )
        data[layer][:, :, start:end] = quantize_fp8(x, self.kv_format, scales[layer])[0]
        return dequantize_fp8(data[layer][:, :, :end], scales[layer])

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        start, end = self.length, self.length + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache overflow: {end} positions needed, max_len {self.max_len}")
        keys = self._store(self.keys, self.key_scales, layer, k, start, end)
        values = self._store(self.values, self.value_scales, layer, v, start, end)
        return keys.to(self.dtype), values.to(self.dtype)


# --8<-- [end:kv]
