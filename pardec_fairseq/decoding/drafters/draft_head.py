"""The ``draft_head`` drafter: the next ``k`` tokens from the verifier's own states.

It keeps, per row, its layers' keys and values of the verifier's decoder states of the accepted
output (each state projected once, in the pass that computed it, written at the row's own
columns as the verifier's cache is) and of the verifier's encoder states (once per batch). Each
proposal is one call of the head over ``k`` slots: no encoder, no re-run over the prefix. The head
only changes speed: exact acceptance keeps the verifier's greedy output whatever it drafts.
"""
import torch

from pardec_fairseq.decoding.drafters import Drafter
from pardec_fairseq.decoding.drafters.checkpoints import check_dictionaries
from pardec_fairseq.decoding.proposals import Proposal
from pardec_fairseq.models.draft_head import (DraftHead, DraftHeadModel, same_fingerprint, source_visible,
                                              verifier_fingerprint)


class DraftHeadDrafter(Drafter):
    def __init__(self, model: DraftHeadModel):
        self.model, self.head = model, model.head
        self.block_size = model.head.block_size

    @classmethod
    def from_state(cls, path, state, src_dict, tgt_dict, verifier):
        saved = state.get("task_state", {})
        check_dictionaries(path, saved, src_dict, tgt_dict)
        if not same_fingerprint(saved.get("verifier_fingerprint", []), verifier_fingerprint(verifier)):
            raise ValueError(f"--drafter-path {path} is a draft head trained for another verifier than the model "
                             "decoding here (its weights differ): train a head with --verifier-path set to this "
                             "checkpoint")
        args = state["cfg"].model
        decoder = verifier.decoder
        head = DraftHead(args, state["cfg"].task.block_size, decoder.embed_tokens.embedding_dim,
                         decoder.output_embed_dim, verifier.encoder.embed_tokens.embedding_dim)
        model = DraftHeadModel(head, verifier)
        model.load_state_dict(state["model"], strict=True, model_cfg=args)
        parameter = next(verifier.parameters())
        return cls(model.to(device=parameter.device, dtype=parameter.dtype).eval())

    def begin(self, net_input, max_len, encoded=None):
        if encoded is None or encoded[0] is None:
            raise ValueError("the draft head reads the verifier's encoder states: decode an encoder-decoder model "
                             "through the plugin's engine")
        enc, padding = encoded
        rows, k = enc.size(0), self.block_size
        self.encoders = self.model.encoder_keys_values(enc)
        self.source_visible = source_visible(padding, enc)
        # a pass writes up to k + 1 states from column lengths <= max_len
        capacity = max_len + k + 2
        self.memory = []
        for keys, _ in self.encoders:
            shape = (rows, keys.size(1), capacity, keys.size(3))
            self.memory.append((keys.new_zeros(shape), keys.new_zeros(shape)))
        self.columns = torch.arange(capacity, device=enc.device)
        self.last_state = enc.new_zeros(rows, self.head.final_norm.weight.numel())
        self.slots_visible = torch.ones(rows, 1, k, k, dtype=torch.bool, device=enc.device)

    def propose(self, state) -> Proposal:
        draft = self.model.output_layer(self.slot_features(state)).argmax(-1)
        return Proposal(tokens=draft, lengths=torch.full_like(state.lengths, self.block_size))

    def slot_features(self, state):
        """``[rows, k, d]``: the head's output for the next ``k`` tokens after the accepted output."""
        rows, k = state.lengths.size(0), self.block_size
        embedding = self.model.verifier.decoder.embed_tokens(state.last_tokens())
        x = self.head.slots(embedding, self.last_state.unsqueeze(1)).view(rows, k, -1)
        before = (self.columns < state.lengths.unsqueeze(1)).view(rows, 1, 1, -1).expand(rows, 1, k, -1)
        visible = torch.cat([before, self.slots_visible], -1)
        return self.head(x, self.memory, visible, self.encoders, self.source_visible)

    def update(self, scores, verdict, state):
        """Keep the states of the tokens the pass accepted (the pass's first token and the accepted
        draft), at the row's next columns."""
        states = scores.hidden_states(0)
        if verdict.path is not None:
            states = states.gather(1, verdict.path.unsqueeze(2).expand(-1, -1, states.size(2)))
        rows, m, _ = states.shape
        index = (state.lengths.unsqueeze(1) + self.columns[:m]).view(rows, 1, m, 1)
        for (keys, values), (new_keys, new_values) in zip(self.memory, self.model.memory_keys_values(states)):
            index_for = index.expand(-1, keys.size(1), -1, keys.size(3))
            keys.scatter_(2, index_for, new_keys)
            values.scatter_(2, index_for, new_values)
        self.last_state = states.gather(1, verdict.accepted.view(rows, 1, 1).expand(-1, 1, states.size(2))).squeeze(1)

    def keep_rows(self, rows):
        self.encoders = [(keys[rows], values[rows]) for keys, values in self.encoders]
        self.memory = [(keys[rows], values[rows]) for keys, values in self.memory]
        if self.source_visible.size(0) > 1:
            self.source_visible = self.source_visible[rows]
        self.last_state = self.last_state[rows]
        self.slots_visible = self.slots_visible[rows]
