"""Training criterions of the plugin: ``blockwise_cross_entropy`` for the blockwise-head
Transformer; the glancing block loss comes with issue 5."""
from pardec_fairseq.criterions import blockwise_cross_entropy  # noqa: F401  (registration)
