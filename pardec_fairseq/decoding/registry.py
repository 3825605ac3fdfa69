"""``--gen-algo`` names and the decoders behind them, in the style of fairseq's registries."""
from pardec_fairseq.decoding.generator import ParallelDecodingGenerator
from pardec_fairseq.decoding.options import DecodingOptions

DECODERS = {}


def register_algorithm(name):
    def register(cls):
        if name in DECODERS:
            raise ValueError(f"--gen-algo {name} is registered twice")
        DECODERS[name] = cls
        return cls

    return register


def build_generator(algorithm, models, tgt_dict, generation_args, task_cfg, stats_path=None):
    options = DecodingOptions.from_generation_args(generation_args, algorithm)
    decoder = DECODERS[algorithm](tgt_dict, options, task_cfg)
    return ParallelDecodingGenerator(algorithm, decoder, models, tgt_dict, options, stats_path)
