"""``blockwise_cross_entropy``: the training loss of the blockwise-head Transformer.

Head ``i`` (1-based) at target position ``t`` predicts the token ``i - 1`` positions after the one
head 1 predicts, so its targets are the sentence's targets shifted left by ``i - 1`` and padded.
The loss is the label-smoothed cross entropy of the weighted sum over heads (Kim et al., appendix
C.1), or of one head drawn per batch (Stern et al. section 6, to save memory). The draw uses torch's
generator, which fairseq seeds from the update number on every worker, so all workers train the
same head.
"""
import math
from dataclasses import dataclass, field
from typing import List, Optional

import torch
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.dataclass import FairseqDataclass
from omegaconf import II


@dataclass
class BlockwiseCrossEntropyConfig(FairseqDataclass):
    label_smoothing: float = field(default=0.0, metadata={"help": "label smoothing epsilon, 0 means none"})
    head_weights: Optional[str] = field(
        default=None,
        metadata={"help": "comma-separated loss weight of each head, e.g. '1,0.9,0.8,0.7' (Kim et al. C.1); "
                  "default 1 for every head"},
    )
    random_head: bool = field(
        default=False,
        metadata={"help": "train one head drawn uniformly per batch instead of the weighted sum (Stern et al. "
                  "6); with --identity-first-head and --freeze-base head 1 has nothing to train and is "
                  "never drawn"},
    )
    sentence_avg: bool = II("optimization.sentence_avg")


def shifted_targets(target, head, pad):
    """Head ``head`` (0-based) predicts ``target[:, t + head]`` at position ``t``."""
    if head == 0:
        return target
    return torch.cat([target[:, head:], target.new_full((target.size(0), min(head, target.size(1))), pad)], 1)


def parse_head_weights(text, heads) -> List[float]:
    if text is None:
        return [1.0] * heads
    weights = [float(w) for w in text.split(",")]
    if len(weights) != heads or any(w < 0 for w in weights) or not any(weights):
        raise ValueError(f"--head-weights {text!r} needs {heads} non-negative weights, not all 0 "
                         f"(one per --block-heads)")
    return weights


@register_criterion("blockwise_cross_entropy", dataclass=BlockwiseCrossEntropyConfig)
class BlockwiseCrossEntropyCriterion(FairseqCriterion):
    def __init__(self, task, label_smoothing=0.0, head_weights=None, random_head=False, sentence_avg=False):
        super().__init__(task)
        self.eps, self.head_weights_text, self.random_head = label_smoothing, head_weights, random_head
        self.sentence_avg = sentence_avg

    def _heads_and_weights(self, model):
        heads_module = getattr(model.decoder, "blockwise_heads", None)
        if heads_module is None:
            raise ValueError("--criterion blockwise_cross_entropy trains --arch blockwise_transformer models")
        weights = parse_head_weights(self.head_weights_text, heads_module.heads)
        if not self.random_head:
            return [i for i, w in enumerate(weights) if w > 0], weights
        trainable = [i for i in range(heads_module.heads)
                     if not (i == 0 and heads_module.identity_first
                             and not model.decoder.output_projection.weight.requires_grad)]
        return [trainable[int(torch.randint(len(trainable), (1,)))]], [1.0] * heads_module.heads

    def forward(self, model, sample, reduce=True):
        heads, weights = self._heads_and_weights(model)
        logits, _ = model(**sample["net_input"], block_heads=heads)
        target = sample["target"]
        # every head's keys in every output: fairseq sums logging outputs by the first one's keys
        logging_output = {f"{key}_{head + 1}": 0 for head in range(len(weights)) for key in ("nll", "correct", "count")}
        loss = nll_total = 0.0
        for head, head_logits in zip(heads, logits):
            lprobs = utils.log_softmax(head_logits, dim=-1).view(-1, head_logits.size(-1))
            head_target = shifted_targets(target, head, self.padding_idx).reshape(-1)
            head_loss, nll = label_smoothed_nll_loss(lprobs, head_target, self.eps, ignore_index=self.padding_idx)
            loss = loss + weights[head] * head_loss
            nll_total = nll_total + nll
            valid = head_target.ne(self.padding_idx)
            logging_output[f"nll_{head + 1}"] = nll.data
            logging_output[f"correct_{head + 1}"] = lprobs.argmax(-1).eq(head_target).masked_select(valid).sum().item()
            logging_output[f"count_{head + 1}"] = valid.sum().item()
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output.update(loss=loss.data, nll_loss=nll_total.data, ntokens=sample["ntokens"],
                              nsentences=sample["target"].size(0), sample_size=sample_size,
                              nll_count=sum(logging_output[f"count_{head + 1}"] for head in heads))
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        sample_size, ntokens = total("sample_size"), total("ntokens")
        metrics.log_scalar("loss", total("loss") / sample_size / math.log(2), sample_size, round=3)
        # per target token of the trained heads, so the perplexity does not grow with the number of heads
        metrics.log_scalar("nll_loss", total("nll_loss") / max(total("nll_count"), 1) / math.log(2), ntokens,
                           round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))
        heads = sorted({int(key.split("_")[1]) for log in logging_outputs for key in log if key.startswith("count_")})
        for head in heads:  # per head: its own nll per target token and top-1 accuracy
            count = total(f"count_{head}")
            if count > 0:
                metrics.log_scalar(f"nll_{head}", total(f"nll_{head}") / count / math.log(2), count, round=3)
                metrics.log_scalar(f"acc_{head}", 100.0 * total(f"correct_{head}") / count, count, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
