"""The fast path's building blocks, shared by its decoder and encoder: matrix products on re-laid
weights, layer norms and attention, as plain functions of tensors (no ``nn.Module`` calls)."""
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


class Product:
    """``x @ weight + bias`` over the last dimension of ``x``, with ``weight`` ``(in, out)``-contiguous.

    On a CPU in float32 the library is chosen by the rows of ``x``, as measured on this project's AMD
    CPU (the 19 products of a 3-layer d-256 decoder step in sequence, one thread): up to
    ``numpy_rows`` rows through numpy's BLAS (one row: OpenBLAS gemv, 1.1 ms against 1.4 for torch's
    MKL ``addmm``; the 18 layer products at 2 and 3 rows 0.30-0.43 and 0.37-0.55 ms against 0.66-0.69
    and 0.57-0.64 on oneDNN), more through oneDNN with the weight packed once (8 rows 2.0 ms against
    3.5 for OpenBLAS and 4.1 for MKL; the 8.5 MB output projection is faster there from 2 rows), so the
    CPU keeps two copies of the decoder's matrices. Elsewhere ``addmm``."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor], numpy_rows: int = 3):
        self.weight, self.bias, self.numpy_rows = weight.contiguous(), bias, numpy_rows
        self.uses_numpy = weight.device.type == "cpu" and weight.dtype == torch.float32
        self.packed = None
        if self.uses_numpy:
            self.numpy_weight = self.weight.numpy()
            self.numpy_bias = None if bias is None else bias.numpy()
            if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
                self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.t().contiguous(), 8)

    @classmethod
    def of(cls, *linears: torch.nn.Linear, scale_first: float = 1.0, numpy_rows: int = 3) -> "Product":
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
        return cls(torch.cat(weights, 1), bias, numpy_rows)

    def numpy_apply(self, x: np.ndarray) -> np.ndarray:
        """The product of numpy rows (CPU, float32)."""
        out = x @ self.numpy_weight
        if self.numpy_bias is not None:
            out += self.numpy_bias
        return out

    def __call__(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.size(-1))
        if self.uses_numpy and flat.size(0) <= self.numpy_rows:
            out = torch.from_numpy(self.numpy_apply(flat.numpy()))
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
