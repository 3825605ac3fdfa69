"""The fast path's decoder layers and their cache: fairseq's decoder-layer arithmetic on re-laid weights.

A pass's new tokens are written into a preallocated key/value buffer per layer at each row's own
columns and attend to the columns before them and, among the new ones, to those before them (a chain)
or to those a tree's ``sees`` names; the encoder runs the same layers with every source token seeing
every other one (``AmongNew``). On a CPU the layers of a pass run as one compiled call
(``compiled_layers``), elsewhere as torch operations (``DecoderLayer.forward``).
"""
from dataclasses import dataclass
from typing import List, Optional

import numba
import numpy as np
import torch
from torch import Tensor

from pardec_fairseq.decoding.compiled_layers import CompiledLayers, stacked_products, write_keys_values
from pardec_fairseq.decoding.fast_ops import Norm, Product, attend
from pardec_fairseq.decoding.proposals import DraftTree


@dataclass
class AmongNew:
    """Which of a pass's new tokens each new token sees, read as a tree's ``sees`` ``[rows, n, n]``
    (the draft head's slots see each other; the encoder's tokens see every unpadded token), or ``[rows,
    n, m]``: which of the last ``m`` columns (a tree's earlier levels and the new tokens)."""

    sees: Tensor


class DecoderLayer:
    """One pre- or post-norm decoder layer's weights, re-laid: a fairseq ``TransformerDecoderLayerBase``
    (``of``), or any layer of the same arithmetic (the draft head's)."""

    def __init__(self, heads: int, qkv: Product, self_out: Product, self_norm: Norm, fc1: Product, fc2: Product,
                 activation, ffn_norm: Norm, encoder: Optional[tuple] = None):
        """``qkv``: q (scaled), k and v side by side; ``encoder``: the encoder attention's ``(q
        (scaled), k and v side by side, out, norm)``, or ``None`` without one."""
        self.heads, self.head_dim = heads, qkv.weight.size(1) // 3 // heads
        self.qkv, self.self_out, self.self_norm = qkv, self_out, self_norm
        self.encoder_attention = encoder is not None
        if self.encoder_attention:
            self.enc_q, self.enc_kv, self.enc_out, self.enc_norm = encoder
        self.fc1, self.fc2, self.activation, self.ffn_norm = fc1, fc2, activation, ffn_norm

    @classmethod
    def of(cls, layer, precision: str = "float32") -> "DecoderLayer":
        """A fairseq decoder layer re-laid, its products in ``precision`` (``Product``'s)."""
        self_attn, before = layer.self_attn, layer.normalize_before

        def product(*linears, scale_first=1.0):
            return Product.of(*linears, scale_first=scale_first, precision=precision)
        encoder = None
        if layer.encoder_attn is not None:
            attn = layer.encoder_attn
            encoder = (product(attn.q_proj, scale_first=attn.scaling), product(attn.k_proj, attn.v_proj),
                       product(attn.out_proj), Norm(layer.encoder_attn_layer_norm, before))
        return cls(self_attn.num_heads,
                   product(self_attn.q_proj, self_attn.k_proj, self_attn.v_proj, scale_first=self_attn.scaling),
                   product(self_attn.out_proj), Norm(layer.self_attn_layer_norm, before),
                   product(layer.fc1), product(layer.fc2), layer.activation_fn,
                   Norm(layer.final_layer_norm, before), encoder)

    def encoder_keys_values(self, enc: Tensor) -> Tensor:
        """``enc`` ``[rows, src, d]`` -> keys and values ``[2, rows, heads, src, head_dim]`` (a view)."""
        kv = self.enc_kv(enc)
        return kv.view(kv.size(0), kv.size(1), 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)

    def forward(self, x: Tensor, keys: Tensor, values: Tensor, write: "_Write", enc_keys, enc_values, enc_mask):
        rows, n, _ = x.shape
        residual, h = x, self.self_norm.pre(x)
        qkv = self.qkv(h).view(rows, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        write.into(keys, qkv[1])
        write.into(values, qkv[2])
        h = attend(qkv[0], keys[:, :, :write.columns], values[:, :, :write.columns], write.hidden)
        x = self.self_norm.post(residual + self.self_out(h))
        if self.encoder_attention:
            residual, h = x, self.enc_norm.pre(x)
            q = self.enc_q(h).view(rows, n, self.heads, self.head_dim).transpose(1, 2)
            h = attend(q, enc_keys, enc_values, enc_mask)
            x = self.enc_norm.post(residual + self.enc_out(h))
        residual, h = x, self.ffn_norm.pre(x)
        h = self.fc2(self.activation(self.fc1(h)))
        return self.ffn_norm.post(residual + h)


class EncoderKeysValues:
    """The layers' encoder-attention keys and values ``[layers, 2 (keys, values), rows, heads, src, head_dim]``
    of encoder states ``enc`` ``[rows, src, d]``, in one buffer as the cache holds them; on the vector kernel
    in one compiled call (three torch operations a layer around its product took 0.05 ms a layer on the Zen 3
    VM), where ``Product`` would run each layer's on the kernel too, the layers' products stacked once
    (``stacked_products``)."""

    def __init__(self, layers: List[DecoderLayer]):
        self.layers = layers
        alike = all(layer.enc_kv.on_kernel and layer.enc_kv.panels.dtype == layers[0].enc_kv.panels.dtype
                    for layer in layers)
        self.stacked = stacked_products([layer.enc_kv for layer in layers]) if alike and layers else None

    def __call__(self, enc: Tensor) -> Tensor:
        rows, src = enc.shape[:2]
        if self.stacked is not None and rows * src <= Product.KERNEL_ROWS:
            first = self.layers[0]
            buffers = enc.new_empty(len(self.layers), 2, rows, first.heads, src, first.head_dim)
            write_keys_values(enc.contiguous().numpy(), np.zeros(rows, dtype=np.int64), self.stacked, buffers.numpy())
            return buffers
        return torch.stack([layer.encoder_keys_values(enc) for layer in self.layers])


@dataclass
class _Write:
    """Where a pass's new tokens go in the self-attention buffers, and what each one sees."""

    index: Optional[Tensor]  # [rows, heads, n, hd] buffer columns per row, or None: one slice
    start: int  # the slice's first column when ``index`` is None
    columns: int  # buffer columns the pass attends over
    hidden: Optional[Tensor]  # [rows, 1, n, columns]: True where a new token must not look

    @classmethod
    def plan(cls, first_index: Tensor, n: int, heads: int, head_dim: int, tree: Optional[DraftTree]):
        """New token ``i`` of row ``r`` goes to column ``first_index[r] + i`` and sees the columns
        before it (a chain), or in a tree those ``tree.sees[r, i]`` ``[m]`` names of the last ``m >= n``
        up to the new ones' last and every column before those (``_self_attend_rows`` in
        ``compiled_layers`` alike)."""
        rows, device = first_index.size(0), first_index.device
        start = int(first_index.max())  # with one row, its first column
        columns = start + n
        if rows == 1 and n == 1 and (tree is None or tree.sees.size(2) == 1):  # one token sees every column
            return cls(None, start, columns, None)
        own = first_index.unsqueeze(1) + torch.arange(n, device=device)  # [rows, n] each token's own column
        if tree is None:
            hidden = torch.arange(columns, device=device) > own.unsqueeze(2)
        else:
            seen = tree.sees.size(2)
            relative = (torch.arange(columns, device=device) - (first_index + n - seen).unsqueeze(1)).unsqueeze(1)
            sees = tree.sees.gather(2, relative.clamp(0, seen - 1).expand(rows, n, columns))
            hidden = (relative >= seen) | ((relative >= 0) & ~sees)
        if rows == 1:
            return cls(None, start, columns, hidden.unsqueeze(1))
        return cls(own.view(rows, 1, n, 1).expand(rows, heads, n, head_dim), 0, columns, hidden.unsqueeze(1))

    def into(self, buffer: Tensor, new: Tensor):
        if self.index is None:
            buffer[:, :, self.start:self.start + new.size(2)] = new
        else:
            buffer.scatter_(2, self.index, new)


def run_layers(layers: List[DecoderLayer], compiled: Optional[CompiledLayers], cache: "FastCache", x: Tensor,
               first_index: Tensor, tree, rows: Optional[Tensor] = None) -> Tensor:
    """The layers of a pass over the new tokens' inputs ``x`` ``[rows, n, d]`` of the cache's ``rows``
    (``None``: all): token ``i`` of row ``r`` at buffer column ``first_index[r] + i``, seeing the
    columns before it and, among the new ones, those ``tree.sees`` says (``None``: those up to
    itself); compiled where ``compiled`` is given."""
    if compiled is not None:
        return compiled(cache, x.contiguous(), first_index, tree, rows)
    write = _Write.plan(first_index, x.size(1), layers[0].heads, layers[0].head_dim, tree)
    cache.reserve(write.columns)
    own = cache if rows is None else cache.of_rows(rows)
    for i, layer in enumerate(layers):
        enc_keys, enc_values = (None, None) if own.encoder_kv is None else own.encoder_kv[i]
        x = layer.forward(x, own.buffers[i, 0], own.buffers[i, 1], write, enc_keys, enc_values, own.enc_mask)
    if rows is not None:  # the new columns go back (the rest of each copied row is unchanged)
        low = int(first_index.min())
        cache.buffers[:, :, rows, :, low:write.columns] = own.buffers[:, :, :, :, low:write.columns]
    return x


@dataclass
class FastCache:
    """The fast path's state for the rows of a batch still decoding."""

    buffers: Tensor  # [layers, 2 (keys, values), rows, heads, capacity, head_dim]
    # [layers, 2 (keys, values), rows, heads, src, head_dim] of the layers' encoder attention (EncoderKeysValues);
    # None without it
    encoder_kv: Optional[Tensor]
    enc_mask: Optional[Tensor]  # [rows, 1, 1, src]: True at source padding
    enc: Optional[Tensor]  # [rows, src, d]: the encoder states (for drafters that read them)
    enc_padding: Optional[Tensor]  # [rows, src]
    # the compiled layers' numpy views of the buffers, made once (buffers change only when they grow
    # or rows leave)
    views: Optional[tuple] = None

    def numpy_views(self):
        """The buffers as the compiled layers read them: ``(buffers, encoder_kv, padding, padded)``, the numpy
        views of ``buffers`` and ``encoder_kv`` (empty without encoder attention), the source padding ``[rows,
        src]`` and whether any is padded. Arrays over the layers, not tuples of them, so that a compiled call's
        signature does not depend on how many layers a model has: numba compiled each drafter once per layer
        count (a drafting call's signature takes 10-20 s to compile)."""
        if self.views is None:
            padded = self.enc_mask is not None
            padding = self.enc_mask[:, 0, 0].numpy() if padded else np.zeros((0, 0), dtype=np.bool_)
            encoder_kv = np.zeros((0, 2, 0, 0, 0, 0), dtype=np.float32) if self.encoder_kv is None else \
                self.encoder_kv.numpy()
            self.views = (self.buffers.numpy(), encoder_kv, padding, padded)
        return self.views

    def reserve(self, columns: int):
        """Room for ``columns`` columns: a pass's filler, or a tree's nodes near the end of the output,
        can reach past the ``max_len + 2`` columns an output needs."""
        missing = columns - self.buffers.size(4)
        if missing > 0:
            shape = list(self.buffers.shape)
            shape[4] = missing
            self.buffers = torch.cat([self.buffers, self.buffers.new_zeros(shape)], 4)
            self.views = None

    def keep_path(self, valid: Tensor, path: Tensor):
        """Move the keys and values of each row's kept pass positions ``path`` (``[rows, m]``, from
        column ``valid[r]``) to the columns right after its accepted ones (on a CPU in one compiled call:
        the torch operations took 0.1 ms a tree pass on the Zen 3 VM)."""
        if self.buffers.device.type == "cpu" and self.buffers.dtype == torch.float32:
            _move_path(self.buffers.numpy(), valid.numpy(), path.contiguous().numpy())
        else:
            self.keep_path_vectorised(valid, path)

    def keep_path_vectorised(self, valid: Tensor, path: Tensor):
        """``keep_path`` in torch operations (on a GPU, or in another precision)."""
        layers, _, rows, heads, _, head_dim = self.buffers.shape
        m = path.size(1)
        index = (valid.unsqueeze(1) + path).view(1, 1, rows, 1, m, 1).expand(layers, 2, rows, heads, m, head_dim)
        target = (valid.unsqueeze(1) + torch.arange(m, device=path.device)).view(1, 1, rows, 1, m, 1)
        self.buffers.scatter_(4, target.expand_as(index), self.buffers.gather(4, index))

    def of_rows(self, rows: Tensor) -> "FastCache":
        """A copy of ``rows`` (indices into the batch)."""
        copy = FastCache(self.buffers, self.encoder_kv, self.enc_mask, self.enc, self.enc_padding)
        copy.keep_rows(rows)
        return copy

    def keep_rows(self, rows: Tensor):
        self.views = None
        self.buffers = self.buffers[:, :, rows]
        if self.encoder_kv is not None:
            self.encoder_kv = self.encoder_kv[:, :, rows]
        if self.enc_mask is not None:
            self.enc_mask, self.enc_padding = self.enc_mask[rows], self.enc_padding[rows]
        if self.enc is not None:
            self.enc = self.enc[rows]


@numba.njit(cache=True, nogil=True)
def _move_path(buffers, valid, path):
    """``FastCache.keep_path`` of the numpy buffers ``[layers, 2, rows, heads, capacity, head_dim]``. A
    path's position at depth ``j`` is at least ``j`` (a node comes after its parent), so copying in
    order of depth never reads a column written before."""
    layers, halves, rows, heads = buffers.shape[:4]
    for r in range(rows):
        for j in range(path.shape[1]):
            source, target = valid[r] + path[r, j], valid[r] + j
            if source != target:
                for layer in range(layers):
                    for half in range(halves):
                        for h in range(heads):
                            buffers[layer, half, r, h, target] = buffers[layer, half, r, h, source]
