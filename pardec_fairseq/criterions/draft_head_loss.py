"""``draft_head_loss``: cross-entropy of the ``draft_head`` drafter's slots.

After each prefix of ``t`` target tokens, slot ``i`` is trained on target token ``t + i`` (the
EOS included); slots past the end of the sentence are not scored, nor, for a head drafting among
the first ``--draft-vocab`` words, slots whose target is another word. Only the scored slots are
projected onto the (head's) vocabulary. Besides the loss it logs ``slot1_acc`` (the first slot's accuracy)
and ``accepted``: the mean number of leading slots predicted right, what exact acceptance would
keep of each draft if the verifier's outputs were the targets (train on its own greedy outputs).

``--soft-target-weight w`` mixes in, with weight ``w``, the cross-entropy against the verifier's own
next-token distribution at the slot's position (teacher-forced on the targets, over the words the
head drafts among): on the verifier's greedy outputs its argmax is the hard target, and the rest of
the distribution tells the head which wrong words are nearly right (Hinton et al.'s soft targets;
Zhou et al.'s DistillSpec for drafters). The verifier's states come from the pass the head reads
anyway, so a step adds one projection per target position.

``--state-regression-weight w`` adds, with weight ``w``, the smooth L1 distance (mean over the
features) between each slot's output features and the verifier's state that predicts the same token
(slot ``i`` after ``t`` tokens: the state after input ``t + i - 1``), as EAGLE (Li et al. 2024)
trains its drafter: a head drafting autoregressively (``--draft-head-steps``) feeds its own output back
in place of the verifier's state it has not computed yet, so that output should be that state.
"""
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.dataclass import FairseqDataclass

from pardec_fairseq.criterions.loss_metrics import log_loss_in_bits


@dataclass
class DraftHeadLossConfig(FairseqDataclass):
    label_smoothing: float = field(default=0.0, metadata={"help": "label smoothing of the slot targets"})
    soft_target_weight: float = field(default=0.0, metadata={
        "help": "weight (0 to 1) of the cross-entropy against the verifier's own next-token distributions; "
                "the targets' cross-entropy gets the rest"})
    state_regression_weight: float = field(default=0.0, metadata={
        "help": "weight of the smooth L1 distance between each slot's features and the verifier's state that "
                "predicts the same token (EAGLE's feature loss), for heads that draft autoregressively by feeding "
                "their output back (--draft-head-steps)"})


def slot_targets(target, pad, block_size):
    """``[rows, T, k]``: after ``t`` tokens of ``target`` ``[rows, T]`` (right-padded), slot ``i``'s
    target ``target[t + i]`` (pad past the end)."""
    padded = F.pad(target, (0, block_size), value=pad)
    return padded.unfold(1, block_size, 1)[:, :target.size(1)]


@register_criterion("draft_head_loss", dataclass=DraftHeadLossConfig)
class DraftHeadLossCriterion(FairseqCriterion):
    def __init__(self, task, label_smoothing, soft_target_weight=0.0, state_regression_weight=0.0):
        super().__init__(task)
        if not hasattr(task, "verifier"):
            raise ValueError("--criterion draft_head_loss trains the draft head: use it with "
                             "--task translation_draft_head --arch draft_head")
        if not 0.0 <= soft_target_weight <= 1.0:
            raise ValueError(f"--soft-target-weight {soft_target_weight}: give a weight from 0 (the targets alone) "
                             "to 1 (the verifier's distributions alone)")
        if state_regression_weight < 0.0:
            raise ValueError(f"--state-regression-weight {state_regression_weight}: give a weight of 0 or more")
        self.epsilon, self.soft_weight = label_smoothing, soft_target_weight
        self.regression_weight = state_regression_weight

    def forward(self, model, sample, reduce=True):
        features, extra = model(**sample["net_input"])  # [rows, T, k, d]
        rows, length, block_size, _ = features.shape
        targets = slot_targets(sample["target"], self.padding_idx, block_size)
        real = targets.ne(self.padding_idx)
        # a head drafting among the first --draft-vocab words is trained on those words alone
        scored = real & targets.lt(model.draft_vocab) if model.draft_vocab else real
        logits = model.output_layer(features[scored])
        if self.epsilon == 0.0:  # one fused softmax and its gradient over the [slots, vocabulary] logits
            loss = nll = F.cross_entropy(logits.float(), targets[scored], reduction="sum")
        else:
            loss, nll = label_smoothed_nll_loss(F.log_softmax(logits.float(), dim=-1), targets[scored], self.epsilon)
        if self.soft_weight:
            soft = self.soft_cross_entropy(model, extra["verifier_states"], scored, logits)
            loss = (1.0 - self.soft_weight) * loss + self.soft_weight * soft
        if self.regression_weight:
            loss = loss + self.regression_weight * self.state_distance(features, extra["verifier_states"], real)
        right = torch.zeros_like(scored)
        right[scored] = logits.argmax(-1).eq(targets[scored])
        # leading slots right, at the prefixes before the end (a word the head cannot draft is wrong)
        leading = right.long().cumprod(2).sum(2)[real[:, :, 0]]
        sample_size = int(scored.sum())
        logging_output = {
            "loss": loss.data, "nll_loss": nll.data, "ntokens": sample_size, "nsentences": rows,
            "sample_size": sample_size, "prefixes": leading.numel(), "accepted": int(leading.sum()),
            "slot1_correct": int(right[:, :, 0][real[:, :, 0]].sum()),
        }
        return loss, sample_size, logging_output

    @staticmethod
    def soft_cross_entropy(model, states, scored, logits):
        """Summed cross-entropy of the scored slots' ``logits`` against the verifier's distribution
        at each slot's position: slot ``i`` after ``t`` tokens, the verifier's state after input
        ``t + i - 1`` (``states`` ``[rows, T, d]``, ``scored`` ``[rows, T, k]``)."""
        with torch.no_grad():
            teacher = F.log_softmax(model.output_layer(states).float(), dim=-1)  # [rows, T, words]
            teacher = DraftHeadLossCriterion.slot_states(teacher, scored.size(2))[scored]
        return -(teacher.exp() * F.log_softmax(logits.float(), dim=-1)).sum()

    @staticmethod
    def slot_states(states, block_size):
        """``[rows, T, k, d]``: after ``t`` tokens, the verifier's state after input ``t + i - 1`` for
        slot ``i`` (zeros past the end; those slots are never scored)."""
        padded = F.pad(states, (0, 0, 0, block_size))
        return padded.unfold(1, block_size, 1)[:, :states.size(1)].permute(0, 1, 3, 2)

    @classmethod
    def state_distance(cls, features, states, real):
        """Summed over the ``real`` slots: the smooth L1 distance, averaged over the features, between
        each slot's ``features`` and the verifier's state predicting the slot's token."""
        target = cls.slot_states(states, features.size(2))[real]
        return F.smooth_l1_loss(features[real].float(), target.float(), reduction="none").mean(-1).sum()

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        total = {key: sum(log.get(key, 0) for log in logging_outputs)
                 for key in ("loss", "nll_loss", "sample_size", "prefixes", "accepted", "slot1_correct")}
        log_loss_in_bits(total["loss"], total["nll_loss"], total["sample_size"])
        if total["prefixes"]:
            metrics.log_scalar("slot1_acc", 100.0 * total["slot1_correct"] / total["prefixes"], total["prefixes"],
                               round=2)
            metrics.log_scalar("accepted", total["accepted"] / total["prefixes"], total["prefixes"], round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
