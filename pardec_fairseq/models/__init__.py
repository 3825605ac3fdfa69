"""Model architectures of the plugin: the blockwise-head Transformer (``blockwise_transformer``) and
GAD's non-autoregressive block drafter (``block_nat``)."""
from pardec_fairseq.models import block_nat, blockwise_transformer  # noqa: F401  (registration)
