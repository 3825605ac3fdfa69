"""The fairseq generation options that the plugin's algorithms honour, checked once at build time."""
import math
from dataclasses import dataclass

import torch

# Generation options of fairseq whose non-default value changes the search itself. The plugin's
# algorithms reproduce greedy search, so they refuse these instead of ignoring them silently.
_UNSUPPORTED = {
    "sampling": (False, "sampling"),
    "constraints": (None, "lexical constraints"),
    "prefix_size": (0, "forced target prefixes"),
    "match_source_len": (False, "--match-source-len"),
    "no_repeat_ngram_size": (0, "n-gram blocking"),
    "diverse_beam_groups": (-1, "diverse beam search"),
    "diversity_rate": (-1.0, "diverse siblings search"),
    "print_alignment": (None, "--print-alignment"),
    "score_reference": (False, "--score-reference"),
}


@dataclass(frozen=True)
class DecodingOptions:
    max_len_a: float = 0.0
    max_len_b: int = 200
    min_len: int = 1
    unk_penalty: float = 0.0
    temperature: float = 1.0
    len_penalty: float = 1.0
    normalize_scores: bool = True

    @classmethod
    def from_generation_args(cls, args, algorithm):
        """Read fairseq's GenerationConfig (or an argparse Namespace) and refuse what greedy
        decoding cannot honour, naming the option and the way out."""
        for name, (default, what) in _UNSUPPORTED.items():
            value = getattr(args, name, default)
            if value not in (default, None, False):
                raise ValueError(
                    f"--gen-algo {algorithm} reproduces greedy search and does not support {what} "
                    f"(got {name}={value!r}); drop the option or use --gen-algo fairseq"
                )
        options = cls(
            max_len_a=getattr(args, "max_len_a", 0),
            max_len_b=getattr(args, "max_len_b", 200),
            min_len=getattr(args, "min_len", 1),
            unk_penalty=getattr(args, "unkpen", 0.0),
            temperature=getattr(args, "temperature", 1.0),
            len_penalty=getattr(args, "lenpen", 1.0),
            normalize_scores=not getattr(args, "unnormalized", False),
        )
        if options.temperature <= 0:
            raise ValueError("--temperature must be greater than 0")
        return options

    def max_len(self, padded_src_len, max_decoder_positions):
        """fairseq's rule: from the padded source width of the batch, capped by the positions."""
        max_len = min(int(self.max_len_a * padded_src_len + self.max_len_b), max_decoder_positions - 1)
        if self.min_len > max_len:
            raise ValueError(
                f"--min-len {self.min_len} is larger than the maximum output length {max_len}; "
                "lower --min-len or raise --max-len-a/--max-len-b"
            )
        return max_len

    def apply_length_limits(self, lprobs, steps, max_len, eos):
        """Force EOS at the maximum length and forbid it before the minimum, as fairseq does.
        ``lprobs``: ``[rows, n, vocab]`` for the fairseq steps ``steps`` ``[rows, n]``."""
        first, last = steps.aminmax()
        if int(last) >= max_len:
            at_max = steps >= max_len
            eos_lprobs = lprobs[..., eos].clone()
            lprobs.masked_fill_(at_max.unsqueeze(-1), -math.inf)
            lprobs[..., eos] = eos_lprobs
        if int(first) < self.min_len:
            lprobs[..., eos] = lprobs[..., eos].masked_fill(steps < self.min_len, -math.inf)
        return lprobs

    def final_score(self, cumulative_score: torch.Tensor, length: int):
        if self.normalize_scores:
            return cumulative_score / length ** self.len_penalty
        return cumulative_score
