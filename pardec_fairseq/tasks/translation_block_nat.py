"""``translation_block_nat``: training the non-autoregressive block drafter of GAD (Xia et al. 2022).

Every training and validation sentence becomes one block: a prefix length ``p`` is drawn uniformly
from ``0 .. len - 1`` (EOS counted in ``len``), the decoder reads BOS, the first ``p`` target tokens
(their last ``--context-window`` only, if set) and ``--block-size`` mask slots, and each slot's
target is the target token at its position, or padding past the end of the sentence. Validation
draws its prefixes from a generator seeded by the sentence ids, so every validation run scores the
same blocks.
"""
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.tasks import register_task

from pardec_fairseq.models.block_nat import BlockNATModel, make_blocks
from pardec_fairseq.tasks.translation_pardec import TranslationPardecConfig, TranslationPardecTask


@dataclass
class TranslationBlockNATConfig(TranslationPardecConfig):
    block_size: int = field(
        default=25, metadata={"help": "mask slots the drafter fills per block (GAD's k; 25 for base models)"})
    context_window: int = field(
        default=0,
        metadata={"help": "the drafter reads at most this many accepted tokens before its block, the latest "
                  "(0: all of them); bounds what drafting costs on long outputs, and the drafter's target "
                  "positions then need only hold window + block. Generation uses the trained window"})


def draw_prefix_lengths(lengths, generator: Optional[torch.Generator] = None):
    """A prefix length per row, uniform over ``0 .. length - 1`` (so the block holds at least the EOS)."""
    draw = torch.rand(lengths.shape, generator=generator).to(lengths.device)
    return (draw * lengths).long().clamp(max=lengths - 1)


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
        if self.cfg.context_window < 0:
            raise ValueError(f"--context-window {self.cfg.context_window}: give a number of tokens, or 0 for all")
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
        blocks = make_blocks(target, prefix, dictionary.pad(), dictionary.eos(), self.mask, self.cfg.block_size,
                             self.cfg.context_window)
        return {**sample, "block_input": blocks.input, "block_target": blocks.target, "slots": blocks.slots,
                "block_offset": blocks.offset}

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        sample = {**self.add_blocks(sample), "update_num": update_num}
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def valid_step(self, sample, model, criterion):
        generator = torch.Generator().manual_seed(int(sample["id"].sum()) + len(sample["id"]))
        return super().valid_step(self.add_blocks(sample, generator), model, criterion)
