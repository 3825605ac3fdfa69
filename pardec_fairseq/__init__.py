"""pardec-fairseq: lossless parallel decoding for fairseq Transformer models.

Point fairseq at this folder with ``--user-dir``; importing it registers the plugin's tasks,
models, criterions and generators, and allow-lists what fairseq checkpoints need for
``torch.load(weights_only=True)``.
"""
import logging

from pardec_fairseq.checkpoint_safety import allow_fairseq_checkpoints

allow_fairseq_checkpoints()

from pardec_fairseq import criterions, decoding, models, tasks  # noqa: E402,F401  (registration)

# fairseq 0.12's wav2vec2_classification module calls logging.basicConfig(level=DEBUG) when fairseq
# imports its models, so every logger without a level of its own logs DEBUG: numba's compiler then
# wrote 37,000 lines of its passes to the terminal on a first fairseq-generate with the plugin (a cold
# compilation cache). Its logger gets WARNING unless someone has given it a level.
if logging.getLogger("numba").level == logging.NOTSET:
    logging.getLogger("numba").setLevel(logging.WARNING)

__version__ = "0.1.0"
