"""pardec-fairseq: lossless parallel decoding for fairseq Transformer models.

Point fairseq at this folder with ``--user-dir``; importing it registers the plugin's tasks,
models, criterions and generators, and allow-lists what fairseq checkpoints need for
``torch.load(weights_only=True)``.
"""
from pardec_fairseq.checkpoint_safety import allow_fairseq_checkpoints

allow_fairseq_checkpoints()

from pardec_fairseq import criterions, decoding, models, tasks  # noqa: E402,F401  (registration)

__version__ = "0.1.0"
