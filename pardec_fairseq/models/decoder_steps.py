"""The steps of fairseq's ``TransformerDecoderBase.extract_features_scriptable`` before and after its
layers, for the plugin's own decoder passes (the verifier's several new tokens over a cache, the
block drafter's full-context block), which call the layers themselves."""
from typing import Dict, List, Optional, Tuple

from fairseq.models.transformer import TransformerDecoderBase
from torch import Tensor


def decoder_input(decoder, tokens: Tensor, positions: Optional[Tensor], added: Optional[Tensor] = None) -> Tensor:
    """``[len, rows, d]``: the token embeddings of ``tokens`` ``[rows, len]`` (plus ``added``, in
    the embedding space), with the embedded ``positions`` and fairseq's layer norm and dropout."""
    x = decoder.embed_scale * decoder.embed_tokens(tokens)
    if added is not None:
        x = x + added
    if decoder.quant_noise is not None:
        x = decoder.quant_noise(x)
    if decoder.project_in_dim is not None:
        x = decoder.project_in_dim(x)
    if positions is not None:
        x = x + positions
    if decoder.layernorm_embedding is not None:
        x = decoder.layernorm_embedding(x)
    return decoder.dropout_module(x).transpose(0, 1)


def encoder_states(encoder_out: Dict[str, List[Tensor]]) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """What the decoder layers attend to: the encoder's output and its padding mask (or ``None``)."""
    enc = encoder_out["encoder_out"][0] if len(encoder_out["encoder_out"]) > 0 else None
    padding = encoder_out["encoder_padding_mask"][0] if len(encoder_out["encoder_padding_mask"]) > 0 else None
    return enc, padding


def decoder_output(decoder, x: Tensor) -> Tensor:
    """``[rows, len, d]``: the final layer norm and output dimension after the layers' ``[len, rows, d]``."""
    if decoder.layer_norm is not None:
        x = decoder.layer_norm(x)
    x = x.transpose(0, 1)
    if decoder.project_out_dim is not None:
        x = decoder.project_out_dim(x)
    return x


def replaces_output_layer(decoder) -> bool:
    """Whether ``decoder`` overrides fairseq's ``output_layer`` (then its ``output_projection`` alone
    does not give its logits)."""
    return type(decoder).output_layer is not TransformerDecoderBase.output_layer
