"""CTranslate2's greedy search as a benchmark baseline (``pardec-bench --ctranslate2``).

The checkpoint is converted with PyPI ``ctranslate2``'s own fairseq converter, which loads it with
``torch.load(weights_only=True)``: the plugin's allow-list (registered when the plugin is imported)
is what lets it read a fairseq checkpoint. The generator decodes the benchmark's batches with beam 1
under fairseq's length rules (at most ``max_len`` tokens, from the padded source width of the
batch; no end-of-sentence before the first token), and hands back fairseq's hypothesis dicts.
"""
from typing import Optional

import torch


def convert(checkpoint, data, source_lang, target_lang, output_dir) -> Optional[str]:
    """Convert ``checkpoint`` into ``output_dir``; on failure return one line saying why (the
    benchmark notes it instead of failing)."""
    try:
        import ctranslate2
        from ctranslate2.converters import FairseqConverter
    except ImportError as error:
        return f"CTranslate2 is not installed ({error}); pip install ctranslate2"
    try:
        FairseqConverter(str(checkpoint), str(data), source_lang=source_lang, target_lang=target_lang).convert(
            str(output_dir), force=True)
    except Exception as error:  # the converter raises many kinds for models it does not handle
        reason = " ".join(str(error).split()) or type(error).__name__
        return f"CTranslate2 {ctranslate2.__version__} could not convert {checkpoint}: {reason}"
    return None


class CTranslate2Greedy:
    """``generate(models, sample)`` like fairseq's generators, by a CTranslate2 ``Translator``."""

    def __init__(self, model_dir, compute_type, threads, src_dict, tgt_dict, max_len_a, max_len_b, max_positions):
        import ctranslate2

        self.translator = ctranslate2.Translator(str(model_dir), device="cpu", compute_type=compute_type,
                                                 inter_threads=1, intra_threads=threads)
        self.src_dict, self.tgt_dict = src_dict, tgt_dict
        self.max_len_a, self.max_len_b, self.max_positions = max_len_a, max_len_b, max_positions

    def generate(self, models, sample, **kwargs):
        src_tokens = sample["net_input"]["src_tokens"]
        pad, eos = self.src_dict.pad(), self.src_dict.eos()
        # the converted model appends the source EOS itself
        sources = [[self.src_dict[t] for t in row if t not in (pad, eos)] for row in src_tokens.tolist()]
        max_len = min(int(self.max_len_a * src_tokens.size(1) + self.max_len_b), self.max_positions - 1)
        results = self.translator.translate_batch(sources, beam_size=1, max_decoding_length=max_len,
                                                  min_decoding_length=1)
        hypos = []
        for result in results:
            # an output that reaches max_len ends there; fairseq forces its EOS at that point
            tokens = [self.tgt_dict.index(symbol) for symbol in result.hypotheses[0]] + [self.tgt_dict.eos()]
            hypos.append([{"tokens": torch.tensor(tokens)}])
        return hypos
