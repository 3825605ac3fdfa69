"""``translation_block_nat``: training the non-autoregressive block drafter of GAD (Xia et al. 2022).

Every training and validation sentence becomes one block: a prefix length ``p`` is drawn uniformly
from ``0 .. len - 1`` (EOS counted in ``len``), the decoder reads BOS, the first ``p`` target tokens
and ``--block-size`` mask slots, and each slot's target is the target token at its position, or
padding past the end of the sentence. Validation draws its prefixes from a generator seeded by the
sentence ids, so every validation run scores the same blocks.
"""
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.tasks import register_task

from pardec_fairseq.models.block_nat import BlockNATModel
from pardec_fairseq.tasks.translation_pardec import TranslationPardecConfig, TranslationPardecTask


@dataclass
class TranslationBlockNATConfig(TranslationPardecConfig):
    block_size: int = field(
        default=25, metadata={"help": "mask slots the drafter fills per block (GAD's k; 25 for base models)"})


def draw_prefix_lengths(lengths, generator: Optional[torch.Generator] = None):
    """A prefix length per row, uniform over ``0 .. length - 1`` (so the block holds at least the EOS)."""
    draw = torch.rand(lengths.shape, generator=generator).to(lengths.device)
    return (draw * lengths).long().clamp(max=lengths - 1)


def make_blocks(target, prefix, pad, eos, mask, block_size):
    """Decoder input and slot targets for one block per row of ``target`` ([rows, T], right-padded,
    ending in EOS) after ``prefix`` tokens. Returns ``(block_input, block_target, slots)``, where
    ``block_target`` is ``pad`` outside the slots and past each sentence's end, and ``slots`` marks
    the mask positions (whose targets count in the loss, padding included)."""
    rows = target.size(0)
    width = 1 + int(prefix.max()) + block_size
    positions = torch.arange(width, device=target.device).unsqueeze(0)
    in_prefix = (positions >= 1) & (positions <= prefix.unsqueeze(1))
    slots = (positions > prefix.unsqueeze(1)) & (positions <= (prefix + block_size).unsqueeze(1))
    # the token at input position i (i >= 1) is target[i - 1]; positions past the target are padding
    shifted = torch.full((rows, width), pad, dtype=target.dtype, device=target.device)
    columns = min(width - 1, target.size(1))
    shifted[:, 1:1 + columns] = target[:, :columns]
    block_input = torch.full_like(shifted, pad)
    block_input[:, 0] = eos
    block_input = torch.where(in_prefix, shifted, block_input)
    block_input = torch.where(slots, torch.full_like(shifted, mask), block_input)
    block_target = torch.where(slots, shifted, torch.full_like(shifted, pad))
    return block_input, block_target, slots


@register_task("translation_block_nat", dataclass=TranslationBlockNATConfig)
class TranslationBlockNATTask(TranslationPardecTask):
    cfg: TranslationBlockNATConfig

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if not isinstance(model, BlockNATModel):
            raise ValueError(f"--task translation_block_nat trains the block drafter: use --arch block_nat "
                             f"(got a {type(model).__name__})")
        if not 1 <= self.cfg.block_size < model.decoder.max_positions():
            raise ValueError(f"--block-size {self.cfg.block_size} must be at least 1 and below the model's "
                             f"{model.decoder.max_positions()} target positions")
        return model

    def state_dict(self):
        """Checkpoints keep the dictionaries, so a verifier can check that it reads the same tokens."""
        return {**super().state_dict(), "source_symbols": list(self.source_dictionary.symbols),
                "target_symbols": list(self.target_dictionary.symbols)}

    @property
    def mask(self):
        return self.target_dictionary.unk()

    def add_blocks(self, sample, generator=None):
        dictionary, target = self.target_dictionary, sample["target"]
        prefix = draw_prefix_lengths(target.ne(dictionary.pad()).sum(1), generator)
        block_input, block_target, slots = make_blocks(target, prefix, dictionary.pad(), dictionary.eos(), self.mask,
                                                       self.cfg.block_size)
        return {**sample, "block_input": block_input, "block_target": block_target, "slots": slots}

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        sample = {**self.add_blocks(sample), "update_num": update_num}
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def valid_step(self, sample, model, criterion):
        generator = torch.Generator().manual_seed(int(sample["id"].sum()) + len(sample["id"]))
        return super().valid_step(self.add_blocks(sample, generator), model, criterion)
