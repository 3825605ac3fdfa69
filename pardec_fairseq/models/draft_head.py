"""A block drafter that rides on the verifier (``draft_head``): it drafts the next ``--block-size``
tokens from what the verifier already computed.

Why: GAD's block drafter is a second Transformer re-run over the whole accepted prefix every
iteration (54% of GAD's time here), and the BPD heads see only the verifier's last state (weak). This
head reads the verifier's encoder output and its decoder states of the accepted prefix, neither
recomputed, in one or two small layers, and projects with the verifier's own output layer. It is
trained with the verifier frozen (task ``translation_draft_head``, criterion ``draft_head_loss``).

With ``t`` tokens accepted after BOS, the verifier has computed its final decoder states
``H_0 .. H_{t-1}`` (``H_j`` after input ``x_j``, ``x_0`` = BOS) and the last accepted token ``x_t``
has not been through it yet. Slot ``i`` (1..k) predicts ``y_{t+i}``; its input is ``x_t`` as the
verifier's first ``--head-input-layers`` decoder layers see it (0: its embedding) fused with ``H_{t-1}``
(zeros at ``t = 0``) plus a learned slot embedding. In each layer the slots attend to the prefix states
(through the layer's own keys and values), to each other, and to the source; training covers every
``t`` of every sentence in one call.

Why the verifier's first layer (``--head-input-layers 1``, the default): it is exact at the new token,
reading the verifier's own cache of the prefix (decoding writes a drafted token's keys and values where
the verifier's next pass writes its own), so the head need not guess what the verifier's lower layers
make of the context. On LibreOffice En-De (the ``cpu`` preset's 3-layer verifier, one-slot heads, 2-core
CPU) valid next-token accuracy after 5 epochs: 77.6% against 70.3% from the embedding (72.9% after 30
minutes).
"""
from typing import List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.modules import LayerNorm
from torch import Tensor, nn

from pardec_fairseq.models.decoder_steps import replaces_output_layer


class HeadLayer(nn.Module):
    """A pre-norm decoder layer whose self-attention also reads keys and values of the prefix states."""

    def __init__(self, dim: int, encoder_dim: int, heads: int, ffn_dim: int, dropout: float,
                 attention_dropout: float):
        super().__init__()
        if dim % heads:
            raise ValueError(f"--head-attention-heads {heads} must divide the verifier's decoder output size {dim}")
        self.heads, self.dropout, self.attention_dropout = heads, dropout, attention_dropout
        self.self_norm, self.enc_norm, self.ffn_norm = LayerNorm(dim), LayerNorm(dim), LayerNorm(dim)
        self.q, self.slot_kv, self.memory_kv = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, 2 * dim)
        self.self_out = nn.Linear(dim, dim)
        self.enc_q, self.enc_out = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.enc_kv = nn.Linear(encoder_dim, 2 * dim)
        self.fc1, self.fc2 = nn.Linear(dim, ffn_dim), nn.Linear(ffn_dim, dim)

    def split(self, x: Tensor) -> Tensor:
        """``[rows, n, h * hd]`` -> ``[rows, h, n, hd]``."""
        return x.view(x.size(0), x.size(1), self.heads, -1).transpose(1, 2)

    def keys_values(self, projection: nn.Linear, x: Tensor) -> Tuple[Tensor, Tensor]:
        keys, values = projection(x).chunk(2, dim=-1)
        return self.split(keys), self.split(values)

    def attend(self, q: Tensor, keys: Tensor, values: Tensor, visible: Tensor) -> Tensor:
        out = F.scaled_dot_product_attention(self.split(q), keys, values, attn_mask=visible,
                                             dropout_p=self.attention_dropout if self.training else 0.0)
        return out.transpose(1, 2).reshape(q.shape)

    def forward(self, x, memory: Tuple[Tensor, Tensor], visible, encoder: Tuple[Tensor, Tensor], encoder_visible):
        """``x`` ``[rows, n, d]`` the slots; ``memory``: the prefix states' keys and values
        ``[rows, h, m, hd]``; ``visible`` (broadcast to ``[rows, h, n, m + n]``): which prefix states
        and slots each slot attends to; ``encoder_visible`` likewise over the source."""
        h = self.self_norm(x)
        slot_keys, slot_values = self.keys_values(self.slot_kv, h)
        keys, values = torch.cat([memory[0], slot_keys], 2), torch.cat([memory[1], slot_values], 2)
        x = x + F.dropout(self.self_out(self.attend(self.q(h), keys, values, visible)), self.dropout, self.training)
        h = self.enc_norm(x)
        x = x + F.dropout(self.enc_out(self.attend(self.enc_q(h), *encoder, encoder_visible)), self.dropout,
                          self.training)
        h = F.dropout(F.relu(self.fc1(self.ffn_norm(x))), self.dropout, self.training)
        return x + F.dropout(self.fc2(h), self.dropout, self.training)


class DraftHead(nn.Module):
    """The head's own weights, given the verifier's sizes."""

    def __init__(self, args, block_size: int, embed_dim: int, dim: int, encoder_dim: int):
        super().__init__()
        self.block_size = block_size
        self.fuse = nn.Linear(embed_dim + dim, dim)
        self.slot_embedding = nn.Parameter(torch.randn(block_size, dim) * dim ** -0.5)
        self.layers = nn.ModuleList(HeadLayer(dim, encoder_dim, args.head_attention_heads, args.head_ffn_dim,
                                              args.dropout, args.head_attention_dropout)
                                    for _ in range(args.head_layers))
        self.final_norm = LayerNorm(dim)

    def slots(self, token_inputs: Tensor, last_state: Tensor) -> Tensor:
        """``[rows, n, k, d]`` slot inputs from ``[rows, n, e]`` tokens (embedded, or through the verifier's
        first layers) and ``[rows, n, d]`` states."""
        fused = self.fuse(torch.cat([token_inputs, last_state], -1))
        return fused.unsqueeze(2) + self.slot_embedding

    def encoder_keys_values(self, enc: Tensor) -> List[Tuple[Tensor, Tensor]]:
        """Each layer's keys and values of the verifier's encoder states ``[rows, src, d]``."""
        return [layer.keys_values(layer.enc_kv, enc) for layer in self.layers]

    def memory_keys_values(self, states: Tensor) -> List[Tuple[Tensor, Tensor]]:
        """Each layer's keys and values of verifier decoder states ``[rows, n, d]``."""
        return [layer.keys_values(layer.memory_kv, states) for layer in self.layers]

    def forward(self, x, memories: List[Tuple[Tensor, Tensor]], visible, encoders: List[Tuple[Tensor, Tensor]],
                encoder_visible) -> Tensor:
        for layer, memory, encoder in zip(self.layers, memories, encoders):
            x = layer(x, memory, visible, encoder, encoder_visible)
        return self.final_norm(x)


def first_words(projection: nn.Linear, words: int) -> Tuple[Tensor, Optional[Tensor]]:
    """The weight and bias rows of an output ``projection`` for the first ``words`` words of the
    dictionary (all of them with 0): fairseq's dictionaries list words by frequency after the special
    symbols, so drafting among the most frequent words reads and trains a fraction of the output
    matrix (LibreOffice En-De: the first 4,096 of 8,296 cover 94% of a verifier's output tokens)."""
    if not 0 <= words <= projection.out_features:
        raise ValueError(f"--draft-vocab {words} is not a number of words of the target dictionary (0 to "
                         f"{projection.out_features}); 0 drafts among all of them")
    kept = slice(0, words or projection.out_features)
    return projection.weight[kept], None if projection.bias is None else projection.bias[kept]


def token_input_width(decoder, input_layers: int) -> int:
    """The width of a token as the head reads it: the embedding's, or that of the decoder's layers."""
    return decoder.embed_dim if input_layers else decoder.embed_tokens.embedding_dim


def has_fairseq_output_layer(decoder, draft_vocab: int) -> bool:
    """Whether ``decoder`` projects with fairseq's own output layer, which a head can cut to its first
    ``draft_vocab`` words; a decoder with its own output layer is refused with ``--draft-vocab``."""
    if not replaces_output_layer(decoder):
        return True
    if draft_vocab:
        raise ValueError(f"--draft-vocab: the verifier's {type(decoder).__name__} replaces fairseq's output layer, "
                         "so the head cannot project onto part of the vocabulary; drop --draft-vocab")
    return False


def verifier_fingerprint(verifier) -> list:
    """Sums that tell one verifier's weights from another's (output projection and embeddings)."""
    decoder = verifier.decoder
    tensors = [decoder.embed_tokens.weight, decoder.output_projection.weight, verifier.encoder.embed_tokens.weight]
    return [float(t.detach().double().sum()) for t in tensors] + \
        [float(t.detach().double().abs().sum()) for t in tensors]


def same_fingerprint(a, b) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= 1e-6 * max(1.0, abs(x), abs(y)) for x, y in zip(a, b))


class VerifierOutputs(NamedTuple):
    """What the head reads of the frozen verifier for a batch: its encoder output ``[rows, src, d]``,
    the source padding (``None``: none), its final decoder states ``[rows, T, d]`` and the output of its
    first ``--head-input-layers`` decoder layers ``[rows, T, d]`` (``None`` for none: the embedding)."""

    encoder: Tensor
    padding: Optional[Tensor]
    states: Tensor
    inputs: Optional[Tensor] = None


def source_visible(padding: Optional[Tensor], enc: Tensor) -> Tensor:
    """``[rows or 1, 1, 1, src]``: the source positions that are not padding."""
    if padding is None:
        return torch.ones(1, 1, 1, enc.size(1), dtype=torch.bool, device=enc.device)
    return ~padding.view(padding.size(0), 1, 1, -1)


@register_model("draft_head")
class DraftHeadModel(BaseFairseqModel):
    """The head with its frozen verifier: only the head's weights train and are saved."""

    def __init__(self, head: DraftHead, verifier, draft_vocab: int = 0, input_layers: int = 0):
        """``draft_vocab``: the head drafts among the dictionary's first ``draft_vocab`` words (0: all);
        ``input_layers``: the slots read the last token through the verifier's first that many decoder
        layers (0: its embedding)."""
        super().__init__()
        self.head, self.draft_vocab = head, draft_vocab
        self.attach(verifier)
        layers = len(verifier.decoder.layers)
        if not 0 <= input_layers <= layers:
            raise ValueError(f"--head-input-layers {input_layers}: the verifier has {layers} decoder layers; read "
                             f"the last token through 0 (its embedding) to {layers} of them")
        self.input_layers = input_layers

    @staticmethod
    def add_args(parser):
        parser.add_argument("--head-layers", type=int, help="layers of the head (1 or 2 are enough)")
        parser.add_argument("--head-input-layers", type=int,
                            help="the slots read the last accepted token as the verifier's first N decoder layers "
                            "output it (default 1; 0: its embedding, as heads saved before this option): on "
                            "LibreOffice after 30 minutes on a 2-core CPU 79.2%% valid next-token accuracy against "
                            "72.9%%, 3.15 tokens a gad pass against 2.67; decoding runs the layer on each token "
                            "drafted after, which there cost what the fewer passes saved for exact gad, and gad++ "
                            "ran 12%% faster")
        parser.add_argument("--head-attention-heads", type=int, help="attention heads per layer")
        parser.add_argument("--head-ffn-dim", type=int,
                            help="inner size of each layer's feed-forward block (default 256: on LibreOffice's "
                            "whole test set a 256-wide one-slot head drafted 4%% faster a token than a 1,024-wide one "
                            "on a 2-core CPU, its calls reading 0.94 MB of weights a step against 1.33, for 0.06 "
                            "tokens a pass fewer; on an Intel Xeon VM, each trained an hour, 1.52-1.58x plugin greedy "
                            "against 1.51-1.53x at 2.67 tokens a pass against 2.75)")
        parser.add_argument("--dropout", type=float,
                            help="dropout in the head (default 0: on LibreOffice a head without it learnt more per "
                            "update and ran 14%% more updates an hour on a 2-core CPU, where drawing the masks took "
                            "11%% of a step)")
        parser.add_argument("--head-attention-dropout", type=float,
                            help="dropout of the head's attention weights (as fairseq's --attention-dropout; each "
                            "slot's attention spans every prefix state and slot of a sentence in training, so it "
                            "is costly there too)")

    @classmethod
    def build_model(cls, args, task):
        verifier = task.verifier
        decoder = verifier.decoder
        head = DraftHead(args, task.cfg.block_size, token_input_width(decoder, args.head_input_layers),
                         decoder.output_embed_dim, verifier.encoder.embed_tokens.embedding_dim)
        draft_vocab = task.cfg.draft_vocab or 0
        if draft_vocab and has_fairseq_output_layer(decoder, draft_vocab):
            first_words(decoder.output_projection, draft_vocab)  # a number of words the dictionary has
        return cls(head, verifier, draft_vocab, args.head_input_layers)

    def attach(self, verifier):
        """Ride on ``verifier``, kept in eval mode (its weights are frozen by the training task)."""
        self.verifier = verifier
        verifier.eval()

    def train(self, mode: bool = True):
        super().train(mode)
        self.verifier.eval()
        return self

    def state_dict(self, *args, **kwargs):
        return {key: value for key, value in super().state_dict(*args, **kwargs).items()
                if not key.startswith("verifier.")}

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """A saved head has no verifier weights: the attached verifier's stand in."""
        own = {f"verifier.{key}": value for key, value in self.verifier.state_dict().items()}
        return super().load_state_dict({**own, **state_dict}, strict=strict, model_cfg=model_cfg, args=args)

    def max_positions(self):
        return self.verifier.max_positions()

    def output_layer(self, features: Tensor) -> Tensor:
        """Logits over the words the head drafts among."""
        if not self.draft_vocab:
            return self.verifier.decoder.output_layer(features)
        return F.linear(features, *first_words(self.verifier.decoder.output_projection, self.draft_vocab))

    @torch.no_grad()
    def verifier_outputs(self, src_tokens, src_lengths, prev_output_tokens) -> VerifierOutputs:
        """What the head reads of the frozen verifier for a batch."""
        encoder_out = self.verifier.encoder(src_tokens, src_lengths=src_lengths)
        states, extra = self.verifier.decoder.extract_features(prev_output_tokens, encoder_out=encoder_out)
        padding = encoder_out["encoder_padding_mask"][0] if encoder_out["encoder_padding_mask"] else None
        inputs = extra["inner_states"][self.input_layers].transpose(0, 1) if self.input_layers else None
        return VerifierOutputs(encoder_out["encoder_out"][0].transpose(0, 1), padding, states, inputs)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, verifier_outputs: Optional[VerifierOutputs] = None,
                **kwargs):
        """Slot features ``[rows, T, k, d]`` for every prefix length ``t`` of the targets whose
        decoder input is ``prev_output_tokens`` ``[rows, T]`` (BOS, y_1 .. y_{T-1}), and as fairseq's
        decoders do an extra dictionary: ``verifier_states`` ``[rows, T, d]``, the verifier's final
        decoder states, from which the criterion takes the verifier's own next-token distributions.
        ``verifier_outputs``: the verifier's outputs for the batch where they were kept
        (``VerifierMemory``), else computed here."""
        if verifier_outputs is None:
            verifier_outputs = self.verifier_outputs(src_tokens, src_lengths, prev_output_tokens)
        enc, padding, states, inputs = verifier_outputs
        if inputs is None:
            with torch.no_grad():
                inputs = self.verifier.decoder.embed_tokens(prev_output_tokens)
        rows, length, _ = states.shape
        k = self.head.block_size
        last_state = F.pad(states[:, :-1], (0, 0, 1, 0))  # H_{t-1}, zeros at t = 0
        x = self.head.slots(inputs, last_state).view(rows, length * k, -1)
        t = torch.arange(length, device=states.device).repeat_interleave(k)
        # slot (t, i) sees the states before t and the slots of the same t: [T k, T + T k]
        visible = torch.cat([torch.arange(length, device=t.device) < t.unsqueeze(1), t.unsqueeze(1) == t], 1)
        features = self.head(x, self.head.memory_keys_values(states), visible, self.head.encoder_keys_values(enc),
                             source_visible(padding, enc))
        return features.view(rows, length, k, -1), {"verifier_states": states}


@register_model_architecture("draft_head", "draft_head")
def draft_head_architecture(args):
    args.head_layers = getattr(args, "head_layers", 1)
    args.head_input_layers = getattr(args, "head_input_layers", 1)
    args.head_attention_heads = getattr(args, "head_attention_heads", 4)
    args.head_ffn_dim = getattr(args, "head_ffn_dim", 256)
    args.dropout = getattr(args, "dropout", 0.0)
    args.head_attention_dropout = getattr(args, "head_attention_dropout", 0.0)
