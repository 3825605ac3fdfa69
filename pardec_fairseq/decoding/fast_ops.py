"""The fast path's building blocks, shared by its decoder and encoder: matrix products on re-laid
weights, layer norms and attention, as plain functions of tensors (no ``nn.Module`` calls)."""
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from pardec_fairseq.decoding import vector_kernels


class Product:
    """``x @ weight + bias`` over the last dimension of ``x``, with ``weight`` ``(in, out)``-contiguous.

    On a CPU in float32 up to ``KERNEL_ROWS`` rows go through this project's vector kernel on a packed
    copy of the weight (``vector_kernels``: measured on this project's AMD CPU, one thread, it beat
    OpenBLAS and oneDNN at every row count from 1 to 160: 11 against 14 and 42 us for one row of a
    (256, 768) weight, 31 against 65 and 63 us for 8 rows), more through oneDNN with the weight packed
    once (as fast there, and it uses torch's threads). Elsewhere ``addmm``. ``precision``: the kernel's
    weight in float32, bfloat16 (``vector_kernels.pack_bfloat16``; with AVX-512's bfloat16 dot product
    the rows too) or int8 with a scale per column (with AVX2 the rows rounded to bytes too,
    ``vector_kernels.pack_bytes``, else ``vector_kernels.pack_int8``), the last two for a
    drafter's products alone; more rows than ``KERNEL_ROWS`` still go through oneDNN in float32."""

    KERNEL_ROWS = 64

    PRECISIONS = ("float32", "bfloat16", "int8")

    def __init__(self, weight: Tensor, bias: Optional[Tensor], precision: str = "float32"):
        if precision not in self.PRECISIONS:
            raise ValueError(f"a product's precision is one of {', '.join(self.PRECISIONS)}, not {precision}")
        self.weight, self.bias = weight.contiguous(), bias
        self.on_kernel = weight.device.type == "cpu" and weight.dtype == torch.float32
        self.packed = None
        if self.on_kernel:
            # numba's threads must run before a compiled call reaches a product shared among them: a
            # compiled function loaded from numba's cache does not launch them, and a fresh process
            # calling the fast encoder before any verifier started crashed there
            vector_kernels.follow_torch_threads()
            self.columns = weight.size(1)
            weight_array, bias_array = self.weight.numpy(), None if bias is None else bias.numpy()
            if precision == "int8":
                pack = vector_kernels.pack_bytes if vector_kernels.has_byte_products() else vector_kernels.pack_int8
                self.panels, self.panel_bias = pack(weight_array, bias_array)
            else:
                pack = vector_kernels.pack_bfloat16 if precision == "bfloat16" else vector_kernels.pack
                self.panels = pack(weight_array)
                self.panel_bias = vector_kernels.pack_bias(bias_array, self.columns)
            if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
                self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.t().contiguous(), 8)

    @classmethod
    def of(cls, *linears: torch.nn.Linear, scale_first: float = 1.0, precision: str = "float32") -> "Product":
        """The products of ``linears`` side by side (the outputs one after the other: q, k and v in one),
        the first one's output multiplied by ``scale_first`` (the query scaling)."""
        weights, biases = [], []
        for i, linear in enumerate(linears):
            scale = scale_first if i == 0 else 1.0
            weights.append(linear.weight.detach().t() * scale)
            biases.append(None if linear.bias is None else linear.bias.detach() * scale)
        bias = None
        if any(b is not None for b in biases):
            bias = torch.cat([w.new_zeros(w.size(1)) if b is None else b for w, b in zip(weights, biases)])
        return cls(torch.cat(weights, 1), bias, precision)

    @property
    def operands(self):
        """The packed weight as compiled code passes it to ``vector_kernels.product``: ``(panels, bias,
        columns)`` (on the kernel only)."""
        return self.panels, self.panel_bias, self.columns

    def kernel_apply(self, x: np.ndarray) -> np.ndarray:
        """The product of numpy rows ``[rows, in]`` on the vector kernel (CPU, float32)."""
        return vector_kernels.product(np.ascontiguousarray(x), *self.operands)

    def __call__(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.size(-1))
        if self.on_kernel and flat.size(0) <= self.KERNEL_ROWS:
            out = torch.from_numpy(self.kernel_apply(flat.numpy()))
        elif self.packed is not None:
            out = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        elif self.bias is None:
            out = flat @ self.weight
        else:
            out = torch.addmm(self.bias, flat, self.weight)
        return out.view(*x.shape[:-1], out.size(1))


def layer_norm(x: Tensor, module) -> Tensor:
    return F.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)


@dataclass
class Norm:
    """Where a sub-block's layer norm goes: before it (pre-norm) or after the residual (post-norm)."""

    module: torch.nn.Module
    before: bool

    def pre(self, x: Tensor) -> Tensor:
        """A sub-block's input."""
        return layer_norm(x, self.module) if self.before else x

    def post(self, x: Tensor) -> Tensor:
        """A sub-block's output after the residual."""
        return x if self.before else layer_norm(x, self.module)


def attend(q: Tensor, keys: Tensor, values: Tensor, hidden: Optional[Tensor]) -> Tensor:
    """Attention of ``q`` ``[rows, heads, n, hd]`` (already scaled) over ``keys``/``values``
    ``[rows, heads, columns, hd]``; ``hidden`` (broadcast to ``[rows, heads, n, columns]``) masks
    columns out. Returns ``[rows, n, heads * hd]``."""
    weights = q @ keys.transpose(2, 3)
    if hidden is not None:
        weights = weights.masked_fill_(hidden, -math.inf)
    h = torch.softmax(weights, dim=-1, dtype=torch.float32).to(values.dtype) @ values
    return h.transpose(1, 2).reshape(q.size(0), q.size(2), -1)
