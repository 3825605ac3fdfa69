"""The non-autoregressive block drafter of generalized aggressive decoding (Xia et al. 2022).

A Transformer encoder-decoder whose decoder reads the accepted prefix followed by ``k`` mask slots
at their target positions and predicts every slot at once: self-attention goes both ways (only
padding is masked), so each slot sees the whole prefix, the source and the other slots. The mask
is fairseq's ``<unk>``, so the drafter keeps the verifier's dictionary unchanged. ``make_blocks``
lays out its input, for training (task ``translation_block_nat``) and drafting alike. There is no
length predictor: slots past the end of the sentence learn to predict padding. With
``--soft-copy`` each slot's input also holds a mix of the source's token embeddings around the
source position its target index points at (Wei et al. 2019's soft copy, as GAD's drafter offers).
"""
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from torch import Tensor, nn

from pardec_fairseq.models.decoder_steps import decoder_input, decoder_output, encoder_states


class Blocks(NamedTuple):
    """One block per row: the decoder's input and the slots' targets."""

    input: Tensor  # [rows, width]: BOS, the shown prefix, the mask slots, padding
    target: Tensor  # [rows, width]: each slot's target token (pad past the sentence's end), pad elsewhere
    slots: Tensor  # [rows, width]: the mask positions, whose targets count in the loss, padding included
    offset: Tensor  # [rows]: the target index of input position 1 (the prefix tokens a window hides)


def make_blocks(target, prefix, pad, eos, mask, block_size, window=0) -> Blocks:
    """The blocks of ``target`` ([rows, T], right-padded, ending in EOS) after ``prefix`` tokens, of
    which the block input shows the last ``window`` (0: all)."""
    shown = prefix.clamp(max=window) if window > 0 else prefix
    width = 1 + int(shown.max()) + block_size
    positions = torch.arange(width, device=target.device).unsqueeze(0)
    in_prefix = (positions >= 1) & (positions <= shown.unsqueeze(1))
    slots = (positions > shown.unsqueeze(1)) & (positions <= (shown + block_size).unsqueeze(1))
    # input position i >= 1 holds target[prefix - shown + i - 1] (below prefix + width, as prefix <= T);
    # positions past the target, padding
    offset = prefix - shown
    index = offset.unsqueeze(1) + positions - 1
    tokens = F.pad(target, (0, width), value=pad).gather(1, index.clamp(min=0))
    block_input = torch.where(in_prefix, tokens, torch.where(slots, mask, pad))
    block_input[:, 0] = eos
    return Blocks(block_input, torch.where(slots, tokens, pad), slots, offset)


class BlockNATDecoder(TransformerDecoderBase):
    """fairseq's decoder, run over a whole block with self-attention in both directions."""

    def __init__(self, cfg, dictionary, embed_tokens, soft_copy=False):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=cfg.no_cross_attention)
        # soft copy: log of the temperature of the weights over the source, learned
        self.copy_log_temperature = nn.Parameter(torch.zeros(())) if soft_copy else None

    def upgrade_state_dict_named(self, state_dict, name):
        """A drafter with soft copy may start from the weights of a model without it (a verifier's,
        with --finetune-from-model): its temperature then starts at 1."""
        state_dict = super().upgrade_state_dict_named(state_dict, name)
        key = f"{name}.copy_log_temperature" if name else "copy_log_temperature"
        if self.copy_log_temperature is not None and key not in state_dict:
            state_dict[key] = torch.zeros_like(self.copy_log_temperature)
        return state_dict

    def soft_copy(self, encoder_out, width, offset: Optional[Tensor]) -> Tensor:
        """``[rows, width, d]``: for input position ``i`` (target index ``offset + i - 1``), the
        source's scaled token embeddings weighted by ``softmax_j(-|target index - j| / temperature)``
        over the source positions ``j`` (padding, left or right, skipped)."""
        embedding = encoder_out["encoder_embedding"][0]  # [rows, S, d]
        _, padding = encoder_states(encoder_out)
        if padding is None:
            padding = embedding.new_zeros(embedding.shape[:2], dtype=torch.bool)
        source_index = (~padding).long().cumsum(1) - 1
        target_index = torch.arange(width, device=embedding.device) - 1
        if offset is not None:
            target_index = offset.unsqueeze(1) + target_index
        distance = (target_index.unsqueeze(-1) - source_index.unsqueeze(1)).abs().to(embedding.dtype)
        scores = (-distance / self.copy_log_temperature.exp()).masked_fill(padding.unsqueeze(1), -torch.inf)
        return torch.bmm(scores.softmax(-1), embedding)

    def block_features(self, block_input, encoder_out, slots, offset: Optional[Tensor] = None) -> Tensor:
        """``extract_features`` of fairseq's decoder with full context and no cache, plus the soft
        copy into the ``slots``: ``[rows, width, d]``."""
        copied = None
        if self.copy_log_temperature is not None:
            copied = self.soft_copy(encoder_out, block_input.size(1), offset) * slots.unsqueeze(-1)
        positions = self.embed_positions(block_input) if self.embed_positions is not None else None
        x = decoder_input(self, block_input, positions, copied)
        enc, enc_padding = encoder_states(encoder_out)
        padding = block_input.eq(self.padding_idx)
        for layer in self.layers:
            x, _, _ = layer(x, enc, enc_padding, self_attn_padding_mask=padding if bool(padding.any()) else None)
        return decoder_output(self, x)


@register_model("block_nat")
class BlockNATModel(TransformerModel):
    """``transformer`` with a bidirectional decoder over prefix + mask slots (GAD's drafter)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--soft-copy", action="store_true",
                            help="add to each mask slot's input the source's token embeddings, weighted by "
                            "their distance to the slot's target index over a learned temperature")

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        if args.soft_copy and cfg.encoder.embed_dim != embed_tokens.embedding_dim:
            raise ValueError(f"--soft-copy adds source embeddings to the decoder's: --encoder-embed-dim "
                             f"{cfg.encoder.embed_dim} and --decoder-embed-dim {embed_tokens.embedding_dim} must match")
        return BlockNATDecoder(cfg, tgt_dict, embed_tokens, soft_copy=args.soft_copy)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        """``prev_output_tokens``: BOS, the whole prefix, then mask slots (right-padded); logits for
        every position, of which the criterion and the drafter read the slots'."""
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths)
        return self.decode(prev_output_tokens, encoder_out)

    def decode(self, block_input, encoder_out, slots: Optional[Tensor] = None, offset: Optional[Tensor] = None):
        """The decoder alone, for callers that encode a batch once. ``slots``: the positions still
        masked, whose logits alone come back ([slots, vocabulary]): projecting the prefix positions
        onto the vocabulary would cost more than the rest of the decoder and serve no one. Without
        them, every position's logits ([rows, width, vocabulary]), the slots being the mask tokens.
        ``offset``: ``Blocks.offset``, for the soft copy (none: the block shows the whole prefix)."""
        all_positions = slots is None
        if all_positions:
            slots = block_input.eq(self.decoder.dictionary.unk())
        features = self.decoder.block_features(block_input, encoder_out, slots, offset)
        return self.decoder.output_layer(features if all_positions else features[slots]), {}


@register_model_architecture("block_nat", "block_nat")
def block_nat_architecture(args):
    args.soft_copy = getattr(args, "soft_copy", False)
    base_architecture(args)
