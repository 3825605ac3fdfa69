"""The blockwise-head Transformer of Stern et al. (2018), section 6.

A stock Transformer whose decoder output ``h`` passes through one feed-forward layer with hidden
size ``k * d_ffn`` and output size ``k * d_model``; head ``i`` is ``h`` plus the ``i``-th slice of
that output, projected onto the vocabulary by the shared output projection, and predicts the token
``i - 1`` positions after the one the base model predicts. ``output_layer`` gives head 1, so
fairseq's own generators and the plugin's verifier see an ordinary Transformer; with
``--identity-first-head`` head 1 is ``h`` itself and the model's greedy output is its base's.
"""
from typing import List, Optional

import torch
import torch.nn.functional as F
from fairseq import checkpoint_utils
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules import FairseqDropout
from torch import Tensor, nn


class BlockwiseHeads(nn.Module):
    """One feed-forward layer from ``h`` to ``k`` head features, each with a residual to ``h``."""

    def __init__(self, embed_dim, ffn_dim, heads, identity_first, dropout):
        super().__init__()
        self.heads, self.identity_first, self.embed_dim = heads, identity_first, embed_dim
        self.learned = heads - 1 if identity_first else heads
        self.fc1 = nn.Linear(embed_dim, self.learned * ffn_dim)
        self.fc2 = nn.Linear(self.learned * ffn_dim, self.learned * embed_dim)
        self.dropout = FairseqDropout(dropout, module_name=type(self).__name__)
        for layer in (self.fc1, self.fc2):  # as fairseq initialises its feed-forward layers
            nn.init.xavier_uniform_(layer.weight)
            nn.init.constant_(layer.bias, 0.0)

    def _hidden(self, h: Tensor) -> Tensor:
        return self.dropout(F.relu(self.fc1(h)))

    def forward(self, h: Tensor) -> Tensor:
        """``[..., d]`` -> ``[..., k, d]``: the features of every head."""
        return self.combine(h, self.fc2(self._hidden(h)))

    def combine(self, h: Tensor, learned: Tensor) -> Tensor:
        """The heads' features from ``h`` and the feed-forward layer's output ``learned`` (which
        decoding computes on re-laid weights, and for the first heads alone with ``--bpd-heads``)."""
        heads = learned.view(*h.shape[:-1], -1, self.embed_dim) + h.unsqueeze(-2)
        if self.identity_first:
            heads = torch.cat([h.unsqueeze(-2), heads], dim=-2)
        return heads

    def first(self, h: Tensor) -> Tensor:
        """Head 1 alone, without computing the others' outputs."""
        if self.identity_first:
            return h
        return h + F.linear(self._hidden(h), self.fc2.weight[: self.embed_dim], self.fc2.bias[: self.embed_dim])


class BlockwiseTransformerDecoder(TransformerDecoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, heads: BlockwiseHeads, no_encoder_attn=False):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.blockwise_heads = heads

    def output_layer(self, features):
        """Head 1's logits: what fairseq's generators and the verifier score with."""
        return self.output_projection(self.blockwise_heads.first(features))

    def head_logits(self, features: Tensor, heads: Optional[List[int]] = None) -> List[Tensor]:
        """Logits of the heads ``heads`` (0-based; all by default), each ``[..., vocab]``."""
        block = self.blockwise_heads(features)
        heads = range(block.size(-2)) if heads is None else heads
        return [self.output_projection(block[..., i, :]) for i in heads]


@register_model("blockwise_transformer")
class BlockwiseTransformerModel(TransformerModel):
    """``transformer`` plus ``--block-heads k`` prediction heads (Stern et al. 2018)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--block-heads", type=int, metavar="K",
                            help="number of heads p_1..p_k; head i predicts the token i - 1 positions ahead")
        parser.add_argument("--block-ffn-dim", type=int, metavar="N",
                            help="hidden size per head of the heads' feed-forward layer "
                            "(default: --decoder-ffn-embed-dim)")
        parser.add_argument("--identity-first-head", action="store_true",
                            help="head 1 is the decoder output itself, so greedy decoding with head 1 "
                            "equals the base model's")
        parser.add_argument("--init-base-from", metavar="CHECKPOINT",
                            help="initialise every parameter but the heads from a trained 'transformer' "
                            "checkpoint with the same dictionaries and sizes")
        parser.add_argument("--freeze-base", action="store_true",
                            help="train only the heads (Stern et al. 6.1 'frozen'); the base runs without "
                            "dropout, as when decoding")

    @classmethod
    def build_model(cls, args, task):
        if args.block_heads < 1:
            raise ValueError(f"--block-heads must be at least 1 (got {args.block_heads})")
        model = super().build_model(args, task)
        if args.block_heads >= model.decoder.max_positions():
            raise ValueError(f"--block-heads {args.block_heads} does not fit the model's "
                             f"{model.decoder.max_positions()} target positions")
        if args.init_base_from:
            model.load_base(args.init_base_from)
            # checkpoints of this model hold the trained weights: loading one must not need the base
            args.initialised_from, args.init_base_from = args.init_base_from, None
        if args.freeze_base:
            for name, parameter in model.named_parameters():
                parameter.requires_grad = name.startswith("decoder.blockwise_heads.")
        return model

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        heads = BlockwiseHeads(cfg.decoder.embed_dim, args.block_ffn_dim or cfg.decoder.ffn_embed_dim,
                               args.block_heads, args.identity_first_head, cfg.dropout)
        return BlockwiseTransformerDecoder(cfg, tgt_dict, embed_tokens, heads,
                                           no_encoder_attn=cfg.no_cross_attention)

    def train(self, mode: bool = True):
        """With ``--freeze-base`` only the heads train: the base runs without dropout, as it does when
        decoding, so the heads learn from the states they will draft from (with dropout, head 1 of the
        frozen demo verifier matched its own greedy outputs 73% of the time in training)."""
        frozen = getattr(self.args, "freeze_base", False)
        super().train(mode and not frozen)
        if frozen:
            self.decoder.blockwise_heads.train(mode)
        return self

    def load_base(self, path):
        """Copy a trained ``transformer``'s parameters into everything but the heads."""
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
        base = state["model"]
        own = {name: value for name, value in self.state_dict().items()
               if not name.startswith("decoder.blockwise_heads.")}
        missing = sorted(set(own) - set(base))
        unexpected = sorted(name for name in set(base) - set(own) if not name.endswith("_float_tensor"))
        mismatched = sorted(name for name in set(own) & set(base) if own[name].shape != base[name].shape)
        if missing or unexpected or mismatched:
            raise ValueError(
                f"--init-base-from {path} is not a transformer of this shape and vocabulary "
                f"(missing {missing[:3]}, unexpected {unexpected[:3]}, other shapes {mismatched[:3]}); "
                "pass the same --arch sizes and dictionaries it was trained with")
        self.load_state_dict({**self.state_dict(), **{name: base[name] for name in own}})

    def forward(self, src_tokens, src_lengths, prev_output_tokens, block_heads: Optional[List[int]] = None,
                **kwargs):
        """With ``block_heads`` (0-based head indices), the logits of those heads instead of head 1's:
        the criterion asks for them through the model call, so distributed training sees them."""
        if block_heads is None:
            return super().forward(src_tokens, src_lengths, prev_output_tokens, **kwargs)
        features, extra = super().forward(src_tokens, src_lengths, prev_output_tokens, features_only=True)
        return self.decoder.head_logits(features, block_heads), extra


@register_model_architecture("blockwise_transformer", "blockwise_transformer")
def blockwise_architecture(args):
    args.block_heads = getattr(args, "block_heads", 4)
    args.block_ffn_dim = getattr(args, "block_ffn_dim", None)
    args.identity_first_head = getattr(args, "identity_first_head", False)
    args.init_base_from = getattr(args, "init_base_from", None)
    args.freeze_base = getattr(args, "freeze_base", False)
    base_architecture(args)
