"""``glat_block_loss``: the block drafter's loss with glancing (Qian et al. 2021, as GAD trains it).

In training (the encoder runs once), a first decoder pass without gradient predicts every slot;
in each sentence, as many slots as ``ratio`` times the number it got wrong are then revealed (their
ground truth replaces the mask, drawn at random among the slots of real tokens), and a second
decoder pass, with the same dropout masks, is trained on the slots still masked; ``block_acc`` is
the share of those it predicts right. The ratio falls linearly from ``--glat-ratio-start`` to
``--glat-ratio-end`` over ``--glat-anneal-updates`` (0: it stays at the start ratio). Validation
reveals nothing and reports the same loss and the block accuracy, on the slots alone: the copied
prefix is never scored (nor projected onto the vocabulary). Padding targets (slots past the end)
count in the loss, so fairseq's smoothed loss runs without an ignore index.
"""
from dataclasses import dataclass, field

import torch
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.dataclass import FairseqDataclass

from pardec_fairseq.criterions.loss_metrics import log_loss_in_bits


@dataclass
class GlatBlockLossConfig(FairseqDataclass):
    label_smoothing: float = field(default=0.1, metadata={"help": "label smoothing of the slot targets"})
    glat_ratio_start: float = field(
        default=0.5, metadata={"help": "glancing: share of the wrongly predicted slots revealed at update 0"})
    glat_ratio_end: float = field(
        default=0.3, metadata={"help": "glancing: share revealed from --glat-anneal-updates on"})
    glat_anneal_updates: int = field(
        default=0,
        metadata={"help": "updates over which the glancing ratio falls linearly from --glat-ratio-start to "
                  "--glat-ratio-end (GLAT anneals over the whole training: pass --max-update); 0 keeps "
                  "--glat-ratio-start"})


def rng_state(device):
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def set_rng_state(state):
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda)


def glancing_ratio(start, end, anneal_updates, update):
    if anneal_updates <= 0:
        return start
    return start + (end - start) * min(1.0, update / anneal_updates)


def reveal(slots, wrong, candidates, ratio, generator=None):
    """Per row, ``round(ratio * wrong slots)`` random positions among ``candidates`` (a subset of
    ``slots``) to reveal; a [rows, width] mask."""
    count = (wrong & slots).sum(1).float().mul(ratio).round().long()
    scores = torch.rand(candidates.shape, generator=generator).to(slots.device)
    scores = scores.masked_fill(~candidates, 2.0)  # non-candidates sort last
    rank = scores.argsort(1).argsort(1)
    return (rank < count.unsqueeze(1)) & candidates


@register_criterion("glat_block_loss", dataclass=GlatBlockLossConfig)
class GlatBlockLossCriterion(FairseqCriterion):
    def __init__(self, task, label_smoothing, glat_ratio_start, glat_ratio_end, glat_anneal_updates):
        super().__init__(task)
        if not hasattr(task, "add_blocks"):
            raise ValueError("--criterion glat_block_loss trains the block drafter: use it with "
                             "--task translation_block_nat --arch block_nat")
        self.epsilon = label_smoothing
        self.ratio_start, self.ratio_end, self.anneal_updates = glat_ratio_start, glat_ratio_end, glat_anneal_updates

    def forward(self, model, sample, reduce=True):
        net_input, slots = sample["net_input"], sample["slots"]
        block_input, block_target, offset = sample["block_input"], sample["block_target"], sample["block_offset"]
        encoder_out = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])
        scored, continue_from = slots, None
        if model.training:
            ratio = glancing_ratio(self.ratio_start, self.ratio_end, self.anneal_updates, sample.get("update_num", 0))
            dropout_state = rng_state(block_input.device)
            with torch.no_grad():
                first, _ = model.decode(block_input, encoder_out, slots, offset)
            wrong = torch.zeros_like(slots)
            wrong[slots] = first.argmax(-1).ne(block_target[slots])
            revealed = reveal(slots, wrong, slots & block_target.ne(self.padding_idx), ratio)
            block_input = torch.where(revealed, block_target, block_input)
            scored = slots & ~revealed
            continue_from = rng_state(block_input.device)
            set_rng_state(dropout_state)  # the second pass draws the first pass's dropout masks
        logits, _ = model.decode(block_input, encoder_out, scored, offset)  # [scored slots, vocabulary]
        if continue_from is not None:  # and later draws do not repeat the glancing draws
            set_rng_state(continue_from)
        lprobs = model.get_normalized_probs((logits, None), log_probs=True)
        loss, nll = label_smoothed_nll_loss(lprobs, block_target[scored], self.epsilon)
        correct = logits.argmax(-1).eq(block_target[scored])
        sample_size = int(scored.sum())
        logging_output = {
            "loss": loss.data, "nll_loss": nll.data, "ntokens": sample_size,
            "nsentences": slots.size(0), "sample_size": sample_size,
            "slots": int(slots.sum()), "slots_correct": int(correct.sum()),
            "revealed": int((slots & ~scored).sum()),
        }
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        total = {key: sum(log.get(key, 0) for log in logging_outputs)
                 for key in ("loss", "nll_loss", "sample_size", "slots", "slots_correct", "revealed")}
        log_loss_in_bits(total["loss"], total["nll_loss"], total["sample_size"])
        size = max(1, total["sample_size"])
        if total["slots"]:
            metrics.log_scalar("block_acc", 100.0 * total["slots_correct"] / size, size, round=2)
            metrics.log_scalar("revealed", 100.0 * total["revealed"] / total["slots"], total["slots"], round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
