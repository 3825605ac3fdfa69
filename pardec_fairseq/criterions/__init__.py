"""Training criterions of the plugin: ``blockwise_cross_entropy`` for the blockwise-head
Transformer, ``glat_block_loss`` for GAD's block drafter, ``draft_head_loss`` for the draft head."""
from pardec_fairseq.criterions import blockwise_cross_entropy, draft_head_loss, glat_block_loss  # noqa: F401
