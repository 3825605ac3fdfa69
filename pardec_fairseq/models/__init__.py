"""Model architectures of the plugin: the blockwise-head Transformer (``blockwise_transformer``) and
GAD's non-autoregressive block drafter (``block_nat``), and the drafter that rides on the verifier
(``draft_head``)."""
from pardec_fairseq.models import block_nat, blockwise_transformer, draft_head  # noqa: F401  (registration)
