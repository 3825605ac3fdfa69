"""Parallel decoding: every algorithm is the draft -> verify -> accept engine (``engine``) around a
drafter (``drafters``), the verifier pass (``verifier``: ``fast_verifier`` or ``fairseq_verifier``),
an acceptance rule (``acceptance``) and the fairseq path's cache rollback (``cache``); importing
``algorithms`` registers the ``--gen-algo`` names."""
from pardec_fairseq.decoding.compiled_cache import drop_stale_compiled_code

drop_stale_compiled_code()  # before any compiled function loads its cached code
from pardec_fairseq.decoding import algorithms  # noqa: F401  (registers the --gen-algo names)
from pardec_fairseq.decoding.config import DecodingConfig  # noqa: F401
from pardec_fairseq.decoding.registry import ALGORITHMS, build_generator  # noqa: F401
