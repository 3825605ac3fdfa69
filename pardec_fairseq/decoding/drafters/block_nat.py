"""Generalized aggressive decoding's drafter (Xia et al. 2022): a trained ``block_nat`` model.

It reads each row's accepted output (BOS first; only its latest ``--context-window`` tokens if the
drafter was trained with one) followed by ``k`` mask slots laid out as in training
(``make_blocks``), and fills every slot in one decoder call; its encoder runs once per batch. A
draft stops before the first padding the drafter predicts (it learned to pad past the end of a
sentence). The drafter only changes speed: exact acceptance keeps the verifier's greedy output
whatever it drafts.
"""
from types import SimpleNamespace

import torch
from fairseq import models as fairseq_models

from pardec_fairseq.decoding.drafters import Drafter
from pardec_fairseq.decoding.drafters.checkpoints import check_dictionaries
from pardec_fairseq.decoding.proposals import Proposal
from pardec_fairseq.models.block_nat import make_blocks


class NATBlockDrafter(Drafter):
    def __init__(self, model, block_size, tgt_dict, context_window=0):
        self.model, self.block_size, self.context_window = model, block_size, context_window
        self.pad, self.eos, self.mask = tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk()

    @classmethod
    def from_state(cls, path, state, arch, src_dict, tgt_dict, verifier):
        """The drafter of ``--drafter-path`` (its loaded ``state``), refusing a checkpoint that is not a
        block drafter and one trained with other dictionaries than the verifier's."""
        saved = state.get("task_state", {})
        if arch != "block_nat" or "target_symbols" not in saved:
            raise ValueError(f"--drafter-path {path} is a {arch or 'unknown'} checkpoint, not a drafter: train a "
                             "block drafter with --task translation_block_nat --arch block_nat or a draft head with "
                             "--task translation_draft_head --arch draft_head")
        check_dictionaries(path, saved, src_dict, tgt_dict)
        dictionaries = SimpleNamespace(source_dictionary=src_dict, target_dictionary=tgt_dict)
        model = fairseq_models.build_model(state["cfg"].model, dictionaries)
        model.load_state_dict(state["model"], strict=True, model_cfg=state["cfg"].model)
        parameter = next(verifier.parameters())
        model = model.to(device=parameter.device, dtype=parameter.dtype).eval()
        task = state["cfg"].task
        return cls(model, task.block_size, tgt_dict, getattr(task, "context_window", 0))

    def begin(self, net_input, max_len, encoded=None, verifier_cache=None):
        positions = self.model.max_decoder_positions()
        context = min(max_len, self.context_window) if self.context_window > 0 else max_len
        if context + 1 + self.block_size > positions:
            raise ValueError(f"the drafter's {positions} target positions cannot hold an output of up to {max_len} "
                             f"tokens after BOS plus its block of {self.block_size}: lower --max-len-a/--max-len-b "
                             "or train the drafter with more --max-target-positions or a --context-window")
        self.encoder_out = self.model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])

    def propose(self, state) -> Proposal:
        lengths, k = state.lengths, self.block_size
        blocks = make_blocks(state.tokens[:, 1:], lengths, self.pad, self.eos, self.mask, k, self.context_window)
        logits, _ = self.model.decode(blocks.input, self.encoder_out, blocks.slots, blocks.offset)
        draft = logits.argmax(-1).view(-1, k)
        padded = draft.eq(self.pad)
        draft_lengths = torch.where(padded.any(1), padded.long().argmax(1), torch.full_like(lengths, k))
        return Proposal(tokens=draft, lengths=draft_lengths)

    def keep_rows(self, rows):
        self.encoder_out = self.model.encoder.reorder_encoder_out(self.encoder_out, rows)
