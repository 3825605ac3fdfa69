"""Training criterions of the plugin: ``blockwise_cross_entropy`` for the blockwise-head
Transformer, ``glat_block_loss`` for GAD's block drafter."""
from pardec_fairseq.criterions import blockwise_cross_entropy, glat_block_loss  # noqa: F401  (registration)
