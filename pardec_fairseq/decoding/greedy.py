"""Greedy decoding: one verifier pass per output token, the reference every other algorithm must
reproduce token for token. It ranks candidates exactly as fairseq's beam search with beam 1 does
(cumulative score plus the new log-probability, ``topk`` over two candidates) so that even
near-ties resolve the same way, and drops finished rows from the batch at the same steps."""
import math
import time

import torch

from pardec_fairseq.decoding.generator import DecodedSentence
from pardec_fairseq.decoding.registry import register_algorithm


@register_algorithm("greedy")
class GreedyDecoder:
    def __init__(self, tgt_dict, options, cfg=None):
        self.options = options
        self.pad, self.eos = tgt_dict.pad(), tgt_dict.eos()

    def decode(self, verifier, sample, bos_token=None):
        start = time.perf_counter()
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]
        bsz = src_tokens.size(0)
        max_len = self.options.max_len(src_tokens.size(1), verifier.max_decoder_positions())
        cache = verifier.start(net_input)

        tokens = src_tokens.new_full((bsz, max_len + 2), self.pad)
        tokens[:, 0] = self.eos if bos_token is None else bos_token
        cumulative = torch.zeros(bsz, max_len + 1, device=src_tokens.device)
        rows = torch.arange(bsz)  # original batch index of each row still decoding
        finished = [None] * bsz
        for step in range(max_len + 1):
            lprobs = verifier.next_log_probs(cache, tokens[:, : step + 1])
            lprobs = self.options.apply_length_limits(lprobs, step, max_len, self.eos)
            if step > 0:
                lprobs = lprobs + cumulative[:, step - 1 : step]
            top_scores, top_tokens = torch.topk(lprobs, k=min(2, lprobs.size(1) - 1))
            cumulative[:, step] = top_scores[:, 0]
            tokens[:, step + 1] = top_tokens[:, 0]

            done = top_tokens[:, 0].eq(self.eos) & top_scores[:, 0].ne(-math.inf)
            if not done.any():
                continue
            seconds = time.perf_counter() - start
            for row in done.nonzero().squeeze(1).tolist():
                finished[rows[row]] = DecodedSentence(
                    tokens=tokens[row, 1 : step + 2].clone(),
                    cumulative_scores=cumulative[row, : step + 1].clone(),
                    iterations=step + 1,
                    seconds=seconds,
                )
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            tokens, cumulative, rows = tokens[keep], cumulative[keep], rows[keep.cpu()]
            verifier.keep_rows(cache, keep)
        return finished
