"""Parallel decoding: every algorithm is a decoder run by ``ParallelDecodingGenerator`` over the
shared ``Verifier``; importing a decoder module registers its ``--gen-algo`` name."""
from pardec_fairseq.decoding import greedy  # noqa: F401  (registers "greedy")
from pardec_fairseq.decoding.registry import DECODERS, build_generator  # noqa: F401
