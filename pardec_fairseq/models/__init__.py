"""Model architectures of the plugin: the blockwise-head Transformer (``blockwise_transformer``);
the NAR block drafter comes with issue 5."""
from pardec_fairseq.models import blockwise_transformer  # noqa: F401  (registration)
