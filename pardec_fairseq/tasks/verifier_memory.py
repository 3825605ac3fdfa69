"""The frozen verifier's outputs of each training sentence, kept after the batch that first computed them.

Why: a draft head trains on a frozen verifier, whose encoder output and decoder states of a sentence
are the same every epoch, yet each training step ran the verifier's forward again: on the Zen 3 VM
(LibreOffice En-De, the ``cpu`` preset's verifier, batches of 2,048 target tokens) 228 ms of a 545 ms
step. Kept, every epoch after the first runs the head alone. The price is memory: (source + target
tokens) x the model's width in float32, 1.34 GiB for the 36,747 LibreOffice training pairs, and as much
again per target token for a head that reads the verifier's first layers' output (``--head-input-layers``).
"""
import logging
import os

import torch
from torch import Tensor

from pardec_fairseq.models.draft_head import VerifierOutputs

logger = logging.getLogger(__name__)


def physical_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class VerifierMemory:
    """Each sentence's verifier encoder output and decoder states, in one flat buffer per side, a
    sentence's rows at the offsets its dataset sizes give."""

    def __init__(self, src_sizes, tgt_sizes, encoder_dim: int, state_dim: int, src_pad: int, tgt_pad: int,
                 option: str, input_dim: int = 0):
        """``input_dim``: the width of the verifier's lower layers' outputs the head reads (0: none)."""
        src_sizes, tgt_sizes = (torch.as_tensor(sizes, dtype=torch.long) for sizes in (src_sizes, tgt_sizes))
        self.src_pad, self.tgt_pad = src_pad, tgt_pad
        self.src_sizes, self.tgt_sizes = src_sizes, tgt_sizes
        self.src_offsets = torch.cumsum(src_sizes, 0) - src_sizes
        self.tgt_offsets = torch.cumsum(tgt_sizes, 0) - tgt_sizes
        needed = (int(src_sizes.sum()) * encoder_dim + int(tgt_sizes.sum()) * (state_dim + input_dim)) * 4
        if needed > physical_memory_bytes() // 2:
            raise ValueError(f"{option} keeps {needed / 2 ** 30:.1f} GiB of verifier states for this training set, "
                             f"more than half of this machine's memory: train without {option}")
        self.encoder = torch.empty(int(src_sizes.sum()), encoder_dim)
        self.states = torch.empty(int(tgt_sizes.sum()), state_dim)
        self.inputs = torch.empty(int(tgt_sizes.sum()), input_dim) if input_dim else None
        self.kept = torch.zeros(len(src_sizes), dtype=torch.bool)
        self.dtype = torch.float32  # the verifier's outputs' (fp16 training: half)

    def outputs(self, ids: Tensor, src_tokens: Tensor, prev_output_tokens: Tensor, compute) -> VerifierOutputs:
        """The verifier's outputs for the batch of sentences ``ids``: kept ones, or ``compute()``'s (then kept)."""
        ids, device = ids.cpu(), src_tokens.device
        source, target = src_tokens.ne(self.src_pad).cpu(), prev_output_tokens.ne(self.tgt_pad).cpu()
        if not bool((source.sum(1) == self.src_sizes[ids]).all() and (target.sum(1) == self.tgt_sizes[ids]).all()):
            raise ValueError("the batch's sentences are not as long as the dataset's sizes say: the verifier's "
                             "states cannot be kept for this data")
        src_rows = self._rows(self.src_offsets[ids], self.src_sizes[ids])
        tgt_rows = self._rows(self.tgt_offsets[ids], self.tgt_sizes[ids])
        if not bool(self.kept[ids].all()):
            computed = compute()
            self.encoder[src_rows] = computed.encoder[source.to(device)].float().cpu()
            self.states[tgt_rows] = computed.states[target.to(device)].float().cpu()
            if self.inputs is not None:
                self.inputs[tgt_rows] = computed.inputs[target.to(device)].float().cpu()
            self.kept[ids], self.dtype = True, computed.states.dtype
            if bool(self.kept.all()):
                logger.info(f"kept the verifier's states of all {len(self.kept)} training sentences "
                            f"({self.bytes() / 2 ** 30:.2f} GiB): "
                            "later batches run the head alone")
            return computed
        inputs = None if self.inputs is None else self._padded(self.inputs, tgt_rows, target, device)
        return VerifierOutputs(self._padded(self.encoder, src_rows, source, device), (~source).to(device),
                               self._padded(self.states, tgt_rows, target, device), inputs)

    def _padded(self, buffer: Tensor, rows: Tensor, real: Tensor, device) -> Tensor:
        """``[sentences, length, d]`` on ``device`` in the verifier's dtype: the flat ``buffer``'s ``rows`` at the
        ``real`` (not padding) positions, zeros elsewhere."""
        out = buffer.new_zeros(*real.shape, buffer.size(1))
        out[real] = buffer[rows]
        return out.to(device, self.dtype)

    def bytes(self) -> int:
        """What the kept outputs take."""
        return 4 * sum(t.numel() for t in (self.encoder, self.states, self.inputs) if t is not None)

    @staticmethod
    def _rows(offsets: Tensor, sizes: Tensor) -> Tensor:
        """The flat buffer's rows of sentences at ``offsets`` with ``sizes`` rows each, in order."""
        starts = torch.repeat_interleave(offsets - (torch.cumsum(sizes, 0) - sizes), sizes)
        return starts + torch.arange(int(sizes.sum()))
