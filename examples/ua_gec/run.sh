#!/usr/bin/env bash
# UA-GEC (Ukrainian grammatical error correction) from raw data to results: prepare the data, train
# the autoregressive Transformer, benchmark it with BLEU and GLEU against both test annotators.
#   examples/ua_gec/run.sh [--preset cpu|base] [--minutes M] [--nproc N] [--name NAME]
#       [--bench-sentences N] [--batch-size B] [--repetitions R] [--algorithms "greedy iad"] [--no-bench]
# Training options are those of scripts/train_transformer.sh (default: cpu preset, 60 minutes).
# Outputs go to runs/ua_gec/<NAME, default the preset>/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
default_algorithms="greedy iad"
source "$root/scripts/recipe_options.sh" "$@"
data="$root/data/ua_gec"
save="$root/runs/ua_gec/${name:-$preset}"

# at batch size 1, also the speedup per edit ratio of the output (Ge et al., Figure 5)
edit_ratio=(); [ "$batch_size" -ne 1 ] || edit_ratio=(--edit-ratio)
bash "$root/examples/ua_gec/prepare.sh" "$data"
bash "$root/scripts/train_transformer.sh" "$data/bin" "$save" -s src -t tgt "${train_options[@]}"
[ "$bench" -eq 0 ] || "$root/.venv/bin/python" "$root/scripts/bench.py" "$data/bin" \
  --path "$save/checkpoint_best.pt" -s src -t tgt --detok moses --gec --sources "$data/raw/test.src" \
  --references "$data/raw/test.tgt" "$data/raw/test.tgt2" --out-dir "$save" "${bench_options[@]}" "${edit_ratio[@]}"
