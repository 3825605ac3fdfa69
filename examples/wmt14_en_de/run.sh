#!/usr/bin/env bash
# WMT14 English -> German from the official archives to results, with the papers' settings (Vaswani
# et al.; Stern et al. 2018; Xia et al. 2022): prepare the data (prepare.sh: newstest2013 valid,
# newstest2014 test, 40,000 joint BPE merges) -> train the Transformer, the verifier (transformer-base
# by default; --preset big for transformer-big) -> benchmark it on newstest2014: greedy beside
# fairseq's greedy and beam search, and the algorithms that need no training -> with --draft-head,
# self-distillation (the Transformer's greedy outputs of the training set), a draft head trained on
# them and the benchmark of greedy and gad with it.
#   examples/wmt14_en_de/run.sh [--raw-dir DIR] [--bpe-merges N] [--preset cpu|base|big] [--minutes M]
#       [--max-tokens N] [--nproc N] [--name NAME] [--bench-sentences N] [--batch-size B] [--repetitions R]
#       [--algorithms "greedy lookahead retrieval hybrid-jacobi"] [--ctranslate2] [--threads "1 2"] [--no-bench]
#       [--draft-head [--head-minutes 60] [--head-block-size 1] [--head-layers 1] [--head-algorithms "gad"]
#        [--head-distill-beam 1] [--head-compare [--compare-block-size 4]]]
# Training runs --minutes of wall clock (default 60: far from the papers' 100k+ updates; on a GPU give
# it hours). Without network, --raw-dir DIR names the folder of the archives (prepare.sh says which).
# Outputs go to runs/wmt14_en_de/<NAME, default the preset>/ (scripts/translation_recipe.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
exec bash "$root/scripts/translation_recipe.sh" wmt14_en_de en de "$@"
