"""Tasks of the plugin; importing a module registers its task with fairseq."""
from pardec_fairseq.tasks import (  # noqa: F401
    target_language_modeling, translation_block_nat, translation_draft_head, translation_pardec)
