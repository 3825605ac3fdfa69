"""Cache rollback: after a verifier pass, keep in each decoder self-attention cache only what each
row accepted.

Invariant between passes: row ``r`` of every self-attention cache holds its accepted tokens in
columns ``0 .. valid[r] - 1``; columns after that are holes, hidden from attention by the
``prev_key_padding_mask`` that fairseq's ``MultiheadAttention`` already honours. A pass appends
``n`` columns to every row; rollback moves each row's kept new columns next to its old ones (one
gather, or a plain slice when no row had holes) and masks the rest. Keys carry their positions
from the input embedding, so moving columns does not change attention.
"""
from typing import Dict, List, Optional

import torch
from torch import Tensor


def self_attention_modules(decoder):
    return [layer.self_attn for layer in decoder.layers]


def rollback(self_attentions: List[List[torch.nn.Module]],
             incremental_states: List[Dict[str, Dict[str, Optional[Tensor]]]],
             valid: Tensor, kept: Tensor, new_columns: int):
    """``self_attentions[m]``: the self-attention modules of model ``m``, whose cache is
    ``incremental_states[m]``; ``valid[r]``: accepted columns of row ``r`` before the pass that
    appended ``new_columns``; ``kept[r]``: how many of those it keeps."""
    new_valid = valid + kept
    width = int(new_valid.max())
    columns = torch.arange(width, device=valid.device).unsqueeze(0)
    hole = columns >= new_valid.unsqueeze(1)
    padding_mask = hole if bool(hole.any()) else None
    total = self_attentions[0][0]._get_input_buffer(incremental_states[0])["prev_key"].size(2)
    old = total - new_columns
    gather_index = None
    if not bool((valid == old).all()):  # some rows had holes before the pass: move columns
        gather_index = torch.where(columns < valid.unsqueeze(1), columns,
                                   old + columns - valid.unsqueeze(1)).clamp_(max=total - 1)
    for modules, state in zip(self_attentions, incremental_states):
        for module in modules:
            buffer = module._get_input_buffer(state)
            for name in ("prev_key", "prev_value"):
                cached = buffer[name]
                if gather_index is None:
                    buffer[name] = cached[:, :, :width]
                else:
                    buffer[name] = cached.gather(2, gather_index[:, None, :, None].expand(
                        cached.size(0), cached.size(1), width, cached.size(3)))
            buffer["prev_key_padding_mask"] = padding_mask
            module._set_input_buffer(state, buffer)
