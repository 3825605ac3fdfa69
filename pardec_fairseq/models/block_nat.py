"""The non-autoregressive block drafter of generalized aggressive decoding (Xia et al. 2022).

A Transformer encoder-decoder whose decoder reads the accepted prefix followed by ``k`` mask slots
at their target positions and predicts every slot at once: self-attention goes both ways (only
padding is masked), so each slot sees the whole prefix, the source and the other slots. The mask
is fairseq's ``<unk>``, so the drafter keeps the verifier's dictionary unchanged; the block size and
the slot layout belong to the task ``translation_block_nat``. There is no length predictor: slots
past the end of the sentence learn to predict padding.
"""
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture


@register_model("block_nat")
class BlockNATModel(TransformerModel):
    """``transformer`` with a bidirectional decoder over prefix + mask slots (GAD's drafter)."""

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        """``prev_output_tokens``: BOS, the prefix, then mask slots (right-padded); logits for every
        position, of which the criterion and the drafter read the slots'."""
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths)
        return self.decode(prev_output_tokens, encoder_out)

    def decode(self, prev_output_tokens, encoder_out):
        """The decoder alone, for a drafter that encodes each batch once."""
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, full_context_alignment=True)


@register_model_architecture("block_nat", "block_nat")
def block_nat_architecture(args):
    base_architecture(args)
