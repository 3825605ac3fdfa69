"""The plugin's decoding options, as a fairseq dataclass: the task ``translation_pardec`` inherits
them, so they are flags of ``fairseq-generate``, ``fairseq-interactive`` and ``fairseq-train``
(for ``--eval-bleu``)."""
import os
from dataclasses import dataclass, field, fields
from typing import Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass

ACCEPTANCE_CHOICES = ChoiceEnum(["exact", "top-k", "top-beta", "distance"])
IAD_REENTRY_CHOICES = ChoiceEnum(["unique", "nearest", "expected"])
IAD_DRAFT_LENGTH_CHOICES = ChoiceEnum(["auto", "source", "adaptive"])
VERIFIER_CHOICES = ChoiceEnum(["fast", "fairseq"])
REFINE_CHOICES = ChoiceEnum(["none", "ngram", "neural"])
DRAFT_PRECISION_CHOICES = ChoiceEnum(["auto", "float32", "bfloat16", "int8"])


@dataclass
class DecodingConfig(FairseqDataclass):
    verifier: VERIFIER_CHOICES = field(
        default="fast",
        metadata={"help": "how the verifier runs the model: 'fast' on weights re-laid once per generator and a "
                  "static key/value cache, without the per-call overhead of fairseq's modules; 'fairseq' "
                  "through fairseq's own decoder modules (the reference). Both give fairseq's numbers; a "
                  "model with an option the fast path does not reproduce decodes on the fairseq path, with "
                  "a notice naming the option"},
    )
    acceptance: ACCEPTANCE_CHOICES = field(
        default="exact",
        metadata={"help": "acceptance rule for drafted tokens: 'exact' keeps the verifier's greedy output "
                  "(lossless); 'top-k' accepts a drafted token among the verifier's top --acceptance-top-k "
                  "(Stern et al. 5.1); 'top-beta' among the top --acceptance-top-k whose log-probability is "
                  "within --acceptance-tau of the best (GAD++); 'distance' when its index is within "
                  "--acceptance-epsilon of the verifier's choice (Stern et al. 5.2, for ordinal vocabularies)"},
    )
    acceptance_top_k: int = field(
        default=2, metadata={"help": "k of 'top-k' and beta of 'top-beta' acceptance"})
    acceptance_tau: float = field(
        default=1.0, metadata={"help": "'top-beta' acceptance: largest log-probability gap to the top-1"})
    acceptance_epsilon: int = field(
        default=0, metadata={"help": "'distance' acceptance: largest |drafted - chosen| token index gap"})
    min_block_size: int = field(
        default=1,
        metadata={"help": "keep at least this many tokens per iteration, drafted ones included even when "
                  "rejected (Stern et al. 5.3); above 1 the output is no longer the greedy output"},
    )
    iad_min_ngram: int = field(
        default=1, metadata={"help": "iad: shortest output suffix matched against the source to re-enter "
                             "aggressive decoding"})
    iad_max_ngram: int = field(
        default=3, metadata={"help": "iad: longest output suffix tried when shorter ones occur several times "
                             "in the source (the reference code's 1..3)"})
    iad_reentry: IAD_REENTRY_CHOICES = field(
        default="unique",
        metadata={"help": "iad: when to draft again after a rejection. 'unique': after a unique occurrence "
                  "of the output's last tokens in the source (the reference code); 'nearest': also when "
                  "they occur several times, at the occurrence nearest the source position the copy is "
                  "expected to continue from; 'expected': as 'nearest', and from that position when they "
                  "do not occur (a substitution). Lossless in every case"},
    )
    iad_pass_tokens: int = field(
        default=128,
        metadata={"help": "iad: at most this many tokens, rows x (draft + 1), in one verifier pass; drafts "
                  "are cut to fit (lossless); 0: no budget. On a CPU a pass costs in proportion to its "
                  "tokens, and a batch's rows are as wide as its longest draft; on a GPU, where a pass "
                  "costs about the same at any width, 0 is faster"},
    )
    iad_draft_length: IAD_DRAFT_LENGTH_CHOICES = field(
        default="auto",
        metadata={"help": "iad: how long a draft is. 'source': the rest of the source (Ge et al.); 'adaptive': "
                  "the whole source at first, then at most twice the tokens the row's last pass kept, so "
                  "a model that keeps rejecting the copy drafts a few tokens and one that keeps it doubles "
                  "them: on a CPU each drafted position costs; on a GPU, where a pass costs about the same "
                  "at any width, 'source' saves passes. 'auto': 'adaptive' on a CPU, 'source' elsewhere. "
                  "Lossless in every case"},
    )
    drafter_path: Optional[str] = field(
        default=None,
        metadata={"help": "gad, gad++: checkpoint of the block_nat drafter, trained with --task "
                  "translation_block_nat --arch block_nat on data binarized with the verifier's dictionaries"},
    )
    gad_top_beta: int = field(
        default=3, metadata={"help": "gad++: accept a drafted token when it is among the verifier's top beta "
                             "choices and within --gad-tau of the top-1 (Xia et al. 2022: beta 3, tau 1.0)"})
    gad_tau: float = field(
        default=1.0, metadata={"help": "gad++: largest gap between the log-probabilities of the verifier's "
                               "top-1 and an accepted drafted token"})
    jacobi_block_size: int = field(
        default=4, metadata={"help": "gs-jacobi, hybrid-jacobi: tokens decoded in parallel per block"})
    jacobi_parallel_length: Optional[int] = field(
        default=None,
        metadata={"help": "hybrid-jacobi: output tokens decoded by parallel blocks before it continues one "
                  "token at a time (default: 4 blocks)"},
    )
    lookahead_window: int = field(
        default=4, metadata={"help": "lookahead: output positions the Jacobi window guesses ahead of the last "
                             "accepted token (W)"})
    lookahead_ngram: int = field(
        default=3, metadata={"help": "lookahead: length of the n-grams the window produces and the pass verifies "
                             "(N; the window keeps N - 1 levels of Jacobi iterates)"})
    lookahead_guesses: int = field(
        default=4, metadata={"help": "lookahead: pool n-grams starting with the last accepted token verified per "
                             "pass (G), the most recent first"})
    lookahead_pool: int = field(
        default=128, metadata={"help": "lookahead: n-grams from the window kept per sentence, besides the "
                               "source's; the oldest make room"})
    self_draft_steps: int = field(
        default=24, metadata={"help": "self-draft: tokens the verifier's low-precision copy drafts a pass, one "
                              "at a time (each a one-token pass of its layers over the verifier's cache), a row "
                              "stopping at its first EOS; lossless at every N. On LibreOffice En-De (2-core Zen 4 "
                              "VM, all 1,120 test sentences, batch 1, one run) 8, 16 and 24 kept 6.86, 10.24 and "
                              "12.21 tokens a pass, 1.94x, 2.16x and 2.21x plugin greedy; at batch 16 (480 "
                              "sentences) 4 to 24 all ran 0.86-0.95x"})
    retrieval_corpus: Optional[str] = field(
        default=None,
        metadata={"help": "retrieval: prefix of a binarized split (PREFIX.bin/.idx, binarized with the target "
                  "dictionary) whose text is drafted from, e.g. distilled outputs (default: the train split's "
                  "target side in the data folder). Its index is cached as PREFIX.suffix-index.npz"},
    )
    retrieval_max_suffix: int = field(
        default=8, metadata={"help": "retrieval: longest suffix of the output looked up in the corpus; the "
                             "longest one found is continued"})
    retrieval_depth: int = field(
        default=8, metadata={"help": "retrieval: most tokens drafted per pass (a draft also ends at an EOS)"})
    retrieval_branches: int = field(
        default=1, metadata={"help": "retrieval: continuations drafted per pass, one for each of the most "
                             "frequent next tokens, verified together as a tree (needs --verifier fast above 1)"})
    retrieval_min_share: float = field(
        default=0.5, metadata={"help": "retrieval: a continuation goes on only while its next token follows at "
                               "least this share of the occurrences that led there (0: to --retrieval-depth); "
                               "on a CPU, where each drafted token costs, guesses the corpus disagrees on waste "
                               "more than they win"})
    retrieval_occurrences: int = field(
        default=256, metadata={"help": "retrieval: occurrences of the matched suffix (an even sample when there "
                               "are more) among which the most frequent continuation is drafted"})
    draft_vocab: Optional[int] = field(
        default=None,
        metadata={"help": "bpd, self-draft, and gad with a draft_head: the heads (slots) draft among the first N "
                  "words of the target dictionary alone, the most frequent ones (fairseq's dictionaries are sorted by "
                  "frequency), so their projection reads N rows of the output matrix instead of all; on a CPU "
                  "at batch 1 that projection costs as much as the verifier's own. Lossless: the drafts are "
                  "verified as always. 0: all words; default: a draft head's own (the --draft-vocab it was "
                  "trained with: --task translation_draft_head then scores and trains those words alone), "
                  "else all. A head trained with EAGLE's feature loss (the one-slot head's default) drafts the "
                  "words left out of its training too, through the verifier's projection: with 0 it keeps more "
                  "tokens a pass (LibreOffice En-De: 2.44 against 2.34 for a head trained on 4,096 words), "
                  "worth it where the projection's bytes cost little; on a 2-core CPU they cost what they save"},
    )
    draft_precision: DRAFT_PRECISION_CHOICES = field(
        default="auto",
        metadata={"help": "bpd, self-draft, and gad with a draft_head: the precision of the drafter's own matrix "
                  "products on a CPU. 'bfloat16' rounds their weights to bfloat16 (half the bytes to read) and "
                  "multiplies with AVX-512's bfloat16 dot product where the CPU has it (avx512_bf16; the inputs "
                  "rounded too), else in float32 after widening each weight in a register, accumulating in "
                  "float32; 'int8' rounds them to int8 with a float32 scale per output column (a quarter of the "
                  "bytes); where the CPU has AVX2 each input row is rounded to bytes too and multiplied in "
                  "integers (AVX2's byte "
                  "multiply-adds), elsewhere the weights are converted to float32 in registers: faster drafting "
                  "calls, slightly different drafts, the same output (the verifier checks every drafted token in "
                  "float32). 'auto': int8 where the CPU multiplies bytes (AVX2; the fastest measured on a Zen 3 and on "
                  "a Zen 4, the latter beside AVX-512's bfloat16 dot product), else bfloat16"},
    )
    bpd_heads: Optional[int] = field(
        default=None,
        metadata={"help": "bpd: draft with the model's first N heads alone (head 1 is the verifier, heads 2..N "
                  "propose N - 1 tokens a pass; Stern et al.'s block size k at decoding time); default: all. "
                  "Lossless at every N. On a CPU each drafted token costs a row of every verifier product and a "
                  "head's projection, while a far head's token is seldom kept: fewer heads may decode faster"},
    )
    draft_head_steps: Optional[int] = field(
        default=None,
        metadata={"help": "gad with a draft_head: calls of the head per pass, each going on from the last one's last "
                  "drafted token with the head's own output features in place of the verifier's state (EAGLE's "
                  "autoregressive drafting; train such a head with --block-size 1 --state-regression-weight); "
                  "default for a head of block size 1 drafting a chain on a CPU: for a sentence's chain without "
                  "runner-up leaves (gad++'s), as many (1-16) as pay for themselves given how often the verifier "
                  "kept each position of the process's earlier chains (so gad++'s outputs may depend on the "
                  "sentences decoded before; set N for outputs that do not); else as many as keep a pass's tokens "
                  "(each sentence's last one, drafted ones and leaves) within one tile of the vector kernel, at "
                  "least 1 (one sentence with a leaf: 4 with AVX-512, 3 with AVX2; two sentences: 2 with AVX-512; "
                  "more: 1); for its trees or on a GPU 3; 1 with --refine or a block head"},
    )
    draft_head_branches: int = field(
        default=1,
        metadata={"help": "gad with a one-slot draft_head: grow a tree of drafts (EAGLE-2's dynamic tree), one level "
                  "per call of the head: each level's nodes propose their N likeliest words and the N likeliest paths "
                  "among those (by the product of the head's probabilities) are the next level, all verified in "
                  "one tree pass (needs --verifier fast); 1: a chain"},
    )
    draft_head_threshold: float = field(
        default=0.0,
        metadata={"help": "gad with a one-slot draft_head: a drafted path is kept only while the head's probability of "
                  "it (the product along it) is at least this, so confident drafts grow long and unsure ones stop; "
                  "0: every level keeps its paths"},
    )
    draft_head_nodes: int = field(
        default=0,
        metadata={"help": "gad with a one-slot draft_head: verify only the N likeliest nodes of the draft tree (by the "
                  "head's probability of their path; EAGLE-2's reranking), so a pass pays for the drafts most likely "
                  "kept; 0: all of them"},
    )
    draft_head_leaves: Optional[int] = field(
        default=None,
        metadata={"help": "gad with a one-slot draft_head drafting a chain: also offer the head's runner-up word at "
                  "each of its steps, and verify the steps + N likeliest of the chain's tokens and runner-ups (by "
                  "the head's probability of their path) as a draft tree (needs --verifier fast): where the verifier "
                  "rejects a drafted token, it often chose the runner-up, which then is kept with the verifier's "
                  "next token; the head runs no more calls for them. 0: a chain; default: 1 in batches of one "
                  "sentence with --verifier fast and exact acceptance (a pass of a few more tokens costs about what "
                  "it does without them there, not in larger batches), else 0"},
    )
    draft_shortlist: int = field(
        default=0,
        metadata={"help": "gad with a draft_head drafting among the first --draft-vocab words: each batch also drafts "
                  "among the words beyond those that its sources call for, each source word's N likeliest "
                  "translations (by Dice's coefficient over the sentence pairs of --draft-shortlist-corpus) and "
                  "itself (as Marian's lexical shortlist). The projection reads those words' columns alone, so a "
                  "small --draft-vocab pays: on LibreOffice En-De a head trained on 4,096 of 8,296 words kept 2.42 "
                  "tokens a pass with --draft-vocab 512 --draft-shortlist 40 against 2.34 among its 4,096, 1.31x "
                  "plugin greedy against 1.22x on a 2-core CPU; 0: none"},
    )
    draft_shortlist_corpus: Optional[str] = field(
        default=None,
        metadata={"help": "--draft-shortlist: a binarized parallel split as fairseq-preprocess names it, "
                  "DIR/SPLIT.SRC-TGT (its .SRC and .TGT .bin/.idx, binarized with the model's dictionaries); "
                  "the table is cached beside it as DIR/SPLIT.SRC-TGT.shortlist-FIRST-N.npz (FIRST the "
                  "--draft-vocab, N the --draft-shortlist), rebuilt when a side changes; "
                  "default: the task's train split"},
    )
    refine: REFINE_CHOICES = field(
        default="none",
        metadata={"help": "bpd, and gad with a draft_head: how drafts are chosen from the lattice of the heads' "
                  "(slots') top --refine-top-k tokens per position (Kim et al. 2024). 'none': each head's top-1 (Stern et al.), or with "
                  "--refine-drafts above 1 the paths the heads score best; 'ngram': by the heads' "
                  "log-probabilities plus --refine-lm-weight x the scores of an n-gram model of "
                  "--refine-corpus, the --refine-drafts best paths; 'neural': position by position, by the "
                  "heads' log-probabilities plus --refine-lm-weight x those of the target-side language model "
                  "of --refine-lm-path given the draft so far (one draft). Several drafts are verified "
                  "together as a tree (needs --verifier fast)"},
    )
    refine_top_k: int = field(
        default=4, metadata={"help": "--refine, --refine-drafts: candidates per drafted position"})
    refine_drafts: int = field(
        default=1, metadata={"help": "--refine none/ngram: the best paths through the lattice verified per pass (P)"})
    refine_lm_weight: float = field(
        default=1.0, metadata={"help": "--refine ngram/neural: weight of the language model's log-score "
                               "beside the heads' log-probabilities"})
    refine_ngram_order: int = field(
        default=3, metadata={"help": "--refine ngram: order of the n-gram model (stupid backoff over the "
                             "corpus's counts)"})
    refine_corpus: Optional[str] = field(
        default=None,
        metadata={"help": "--refine ngram: prefix of a binarized split (PREFIX.bin/.idx, target dictionary) "
                  "whose n-grams are counted, e.g. distilled outputs (default: the train split's target side "
                  "in the data folder)"},
    )
    refine_lm_path: Optional[str] = field(
        default=None,
        metadata={"help": "--refine neural: checkpoint of a fairseq transformer_lm of the target side in the "
                  "verifier's target dictionary (scripts/train_rescoring_lm.sh)"},
    )


def decoding_config(task_cfg) -> DecodingConfig:
    """The decoding options of a task config (dataclass, omegaconf or argparse), defaults for the
    rest and for ``None``; the retrieval and refinement corpora default to the task's train split,
    target side."""
    defaults = DecodingConfig()
    cfg = DecodingConfig(**{
        f.name: getattr(task_cfg, f.name, getattr(defaults, f.name))
        for f in fields(DecodingConfig) if not f.name.startswith("_")
    })
    for corpus in ("retrieval_corpus", "refine_corpus"):
        if getattr(cfg, corpus) is None:
            setattr(cfg, corpus, train_target_prefix(task_cfg))
    if cfg.draft_shortlist_corpus is None:
        cfg.draft_shortlist_corpus = train_pair_prefix(task_cfg)
    return cfg


def train_pair_prefix(task_cfg) -> Optional[str]:
    """``DATA/train.SRC-TGT`` of a translation task's first data folder, or ``None``."""
    data, src, tgt = (getattr(task_cfg, name, None) for name in ("data", "source_lang", "target_lang"))
    if not (data and src and tgt):
        return None
    return os.path.join(data.split(os.pathsep)[0], f"train.{src}-{tgt}")


def train_target_prefix(task_cfg) -> Optional[str]:
    """``DATA/train.SRC-TGT.TGT`` of a translation task's first data folder, or ``None``."""
    pair = train_pair_prefix(task_cfg)
    return None if pair is None else f"{pair}.{task_cfg.target_lang}"
