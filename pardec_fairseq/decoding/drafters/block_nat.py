"""Generalized aggressive decoding's drafter (Xia et al. 2022): a trained ``block_nat`` model.

It reads each row's accepted output (BOS first; only its latest ``--context-window`` tokens if the
drafter was trained with one) followed by ``k`` mask slots laid out as in training
(``make_blocks``), and fills every slot in one decoder call; its encoder runs once per batch. A
draft stops before the first padding the drafter predicts (it learned to pad past the end of a
sentence). The drafter only changes speed: exact acceptance keeps the verifier's greedy output
whatever it drafts.
"""
import os
from types import SimpleNamespace

import torch
from fairseq import checkpoint_utils
from fairseq import models as fairseq_models

from pardec_fairseq.decoding.drafters import Drafter
from pardec_fairseq.decoding.proposals import Proposal
from pardec_fairseq.models.block_nat import make_blocks


class NATBlockDrafter(Drafter):
    def __init__(self, model, block_size, tgt_dict, context_window=0):
        self.model, self.block_size, self.context_window = model, block_size, context_window
        self.pad, self.eos, self.mask = tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk()

    @classmethod
    def from_checkpoint(cls, path, src_dict, tgt_dict, verifier):
        """Load ``--drafter-path``, refusing a missing file, a checkpoint that is not a block drafter
        and one trained with other dictionaries than the verifier's."""
        if not path:
            raise ValueError("--gen-algo gad and gad++ draft with a block_nat model: pass its checkpoint with "
                             "--drafter-path (train one with --task translation_block_nat --arch block_nat)")
        if not os.path.isfile(path):
            raise ValueError(f"--drafter-path {path}: no such checkpoint file")
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
        saved = state.get("task_state", {})
        arch = getattr(state["cfg"].model, "arch", None) if state.get("cfg") is not None else None
        if arch != "block_nat" or "target_symbols" not in saved:
            raise ValueError(f"--drafter-path {path} is a {arch or 'unknown'} checkpoint, not a block drafter: "
                             "train one with --task translation_block_nat --arch block_nat")
        for name, dictionary in (("source", src_dict), ("target", tgt_dict)):
            symbols = saved[f"{name}_symbols"]
            if symbols != dictionary.symbols:
                first = next((i for i, (a, b) in enumerate(zip(symbols, dictionary.symbols)) if a != b),
                             min(len(symbols), len(dictionary.symbols)))
                raise ValueError(
                    f"--drafter-path {path} was trained with another {name} dictionary than the verifier's "
                    f"({len(symbols)} vs {len(dictionary.symbols)} symbols, first difference at index {first}); "
                    "train the drafter on data binarized with the verifier's dictionaries (fairseq-preprocess "
                    "--srcdict/--tgtdict)")
        dictionaries = SimpleNamespace(source_dictionary=src_dict, target_dictionary=tgt_dict)
        model = fairseq_models.build_model(state["cfg"].model, dictionaries)
        model.load_state_dict(state["model"], strict=True, model_cfg=state["cfg"].model)
        parameter = next(verifier.parameters())
        model = model.to(device=parameter.device, dtype=parameter.dtype).eval()
        task = state["cfg"].task
        return cls(model, task.block_size, tgt_dict, getattr(task, "context_window", 0))

    def begin(self, net_input, max_len):
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
