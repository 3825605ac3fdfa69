"""``translation_pardec``: fairseq's translation task with the plugin's generators.

It adds ``--gen-algo`` (which generator ``fairseq-generate``/``fairseq-interactive`` and
``--eval-bleu`` use) and ``--pardec-stats`` (a JSON file of decoding statistics), and it keeps the
remainder batch that fairseq 0.12 drops when its size is not a multiple of
``--required-batch-size-multiple``, so every sentence is validated and translated.
"""
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from pardec_fairseq.decoding import ALGORITHMS, DecodingConfig, build_generator

FAIRSEQ_SEARCH = "fairseq"
GEN_ALGO_CHOICES = ChoiceEnum([FAIRSEQ_SEARCH, *ALGORITHMS])


@dataclass
class TranslationPardecConfig(TranslationConfig, DecodingConfig):
    gen_algo: GEN_ALGO_CHOICES = field(
        default=FAIRSEQ_SEARCH,
        metadata={
            "help": "decoding algorithm: 'fairseq' is fairseq's own SequenceGenerator (beam search, "
            "sampling, ...); the others draft, verify and accept on the model: 'greedy' (one token per "
            "pass), 'iad' (input-guided aggressive decoding: drafts by copying the source), 'jacobi', "
            "'gs-jacobi', 'hybrid-jacobi' (Jacobi iteration, whole output or blocks), 'bpd' (blockwise "
            "parallel decoding with the heads of a blockwise_transformer), 'gad' (generalized aggressive "
            "decoding: drafts with the block_nat model or draft head of --drafter-path), 'lookahead' "
            "(n-grams of a Jacobi window and of the source), 'retrieval' (what followed the output's last "
            "tokens in target-side text); with the default "
            "--acceptance exact all of them output exactly what --beam 1 outputs; 'gad++' drafts as 'gad' "
            "and also accepts near-misses (--gad-top-beta, --gad-tau), so its output may differ"
        },
    )
    upsample_primary: int = field(
        default=1,
        metadata={"help": "times the first shard of a split in shards (train, train1, ...) is repeated; fairseq's "
                          "default -1 fails on such a split"},
    )
    pardec_stats: Optional[str] = field(
        default=None,
        metadata={
            "help": "write decoding statistics (iterations, accepted tokens per iteration, "
            "per-sentence timings) of a plugin --gen-algo to this JSON file"
        },
    )


def complete_batches(batches, indices):
    """Append, as one last batch, the indices that fairseq's ``batch_by_size`` left out."""
    batched = np.concatenate(batches) if len(batches) else np.empty(0, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    left_out = indices[~np.isin(indices, batched)]
    return list(batches) + [left_out] if len(left_out) else list(batches)


@register_task("translation_pardec", dataclass=TranslationPardecConfig)
class TranslationPardecTask(TranslationTask):
    cfg: TranslationPardecConfig

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        dataset = self.datasets[split]
        batch_by_size = dataset.batch_by_size

        def batch_by_size_keeping_remainder(indices, *args, **batch_kwargs):
            return complete_batches(batch_by_size(indices, *args, **batch_kwargs), indices)

        # fairseq 0.12 silently drops the last batch when it is not a multiple of
        # --required-batch-size-multiple (96 of 100 sentences translated at --batch-size 50)
        dataset.batch_by_size = batch_by_size_keeping_remainder

    def begin_valid_epoch(self, epoch, model):
        """``--eval-bleu``'s generator was built with the model before training changed it: a plugin
        generator that copied the weights (``--verifier fast``) takes them again."""
        super().begin_valid_epoch(epoch, model)
        refresh = getattr(getattr(self, "sequence_generator", None), "refresh_weights", None)
        if refresh is not None:
            refresh()

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        algorithm = getattr(self.cfg.gen_algo, "value", self.cfg.gen_algo)
        if algorithm == FAIRSEQ_SEARCH:
            return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs,
                                           prefix_allowed_tokens_fn)
        extra = dict(extra_gen_cls_kwargs or {})
        if extra.pop("lm_model", None) is not None:
            raise ValueError(f"--gen-algo {algorithm} does not support --lm-path; use --gen-algo fairseq")
        extra.pop("lm_weight", None)
        if extra or seq_gen_cls is not None or prefix_allowed_tokens_fn is not None:
            raise ValueError(f"--gen-algo {algorithm} cannot take generator options {sorted(extra)}")
        return build_generator(algorithm, models, self.target_dictionary, args, self.cfg,
                               stats_path=self.cfg.pardec_stats, src_dict=self.source_dictionary)
