"""The non-autoregressive block drafter of generalized aggressive decoding (Xia et al. 2022).

A Transformer encoder-decoder whose decoder reads the accepted prefix followed by ``k`` mask slots
at their target positions and predicts every slot at once: self-attention goes both ways (only
padding is masked), so each slot sees the whole prefix, the source and the other slots. The mask
is fairseq's ``<unk>``, so the drafter keeps the verifier's dictionary unchanged. ``make_blocks``
lays out its input, for training (task ``translation_block_nat``) and drafting alike. There is no
length predictor: slots past the end of the sentence learn to predict padding.
"""
import torch
import torch.nn.functional as F
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture


def make_blocks(target, prefix, pad, eos, mask, block_size, window=0):
    """Decoder input and slot targets for one block per row of ``target`` ([rows, T], right-padded,
    ending in EOS) after ``prefix`` tokens, of which the block input shows the last ``window``
    (0: all). Returns ``(block_input, block_target, slots)``, where ``block_target`` is ``pad``
    outside the slots and past each sentence's end, and ``slots`` marks the mask positions (whose
    targets count in the loss, padding included)."""
    shown = prefix.clamp(max=window) if window > 0 else prefix
    width = 1 + int(shown.max()) + block_size
    positions = torch.arange(width, device=target.device).unsqueeze(0)
    in_prefix = (positions >= 1) & (positions <= shown.unsqueeze(1))
    slots = (positions > shown.unsqueeze(1)) & (positions <= (shown + block_size).unsqueeze(1))
    # input position i >= 1 holds target[prefix - shown + i - 1] (below prefix + width, as prefix <= T);
    # positions past the target, padding
    index = (prefix - shown).unsqueeze(1) + positions - 1
    tokens = F.pad(target, (0, width), value=pad).gather(1, index.clamp(min=0))
    block_input = torch.where(in_prefix, tokens, torch.where(slots, mask, pad))
    block_input[:, 0] = eos
    block_target = torch.where(slots, tokens, pad)
    return block_input, block_target, slots


@register_model("block_nat")
class BlockNATModel(TransformerModel):
    """``transformer`` with a bidirectional decoder over prefix + mask slots (GAD's drafter)."""

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        """``prev_output_tokens``: BOS, the prefix, then mask slots (right-padded); logits for every
        position, of which the criterion and the drafter read the slots'."""
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths)
        return self.decode(prev_output_tokens, encoder_out)

    def decode(self, prev_output_tokens, encoder_out, slots=None):
        """The decoder alone, for callers that encode a batch once; with a ``slots`` mask, the
        logits of those positions only ([slots, vocabulary]): projecting the prefix positions onto
        the vocabulary would cost more than the rest of the decoder and serve no one."""
        if slots is None:
            return self.decoder(prev_output_tokens, encoder_out=encoder_out, full_context_alignment=True)
        features, extra = self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=True,
                                       full_context_alignment=True)
        return self.decoder.output_layer(features[slots]), extra


@register_model_architecture("block_nat", "block_nat")
def block_nat_architecture(args):
    base_architecture(args)
