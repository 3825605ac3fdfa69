#!/usr/bin/env bash
# KJV -> WEB (English Bible rewriting) from raw data to results: prepare the data, train the
# autoregressive Transformer, benchmark it with BLEU against the World English Bible.
#   examples/kjv_web/run.sh [--preset cpu|base] [--minutes M] [--nproc N] [--name NAME]
#       [--bench-sentences N] [--batch-size B] [--repetitions R] [--algorithms "greedy iad"] [--no-bench]
# Training options are those of scripts/train_transformer.sh (default: cpu preset, 60 minutes).
# Outputs go to runs/kjv_web/<NAME, default the preset>/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
default_algorithms="greedy iad"
source "$root/scripts/recipe_options.sh" "$@"
data="$root/data/kjv_web"
save="$root/runs/kjv_web/${name:-$preset}"

# at batch size 1, also the speedup per edit ratio of the output (Ge et al., Figure 5)
edit_ratio=(); [ "$batch_size" -ne 1 ] || edit_ratio=(--edit-ratio)
bash "$root/examples/kjv_web/prepare.sh" "$data"
bash "$root/scripts/train_transformer.sh" "$data/bin" "$save" -s kjv -t web "${train_options[@]}"
[ "$bench" -eq 0 ] || "$root/.venv/bin/python" "$root/scripts/bench.py" "$data/bin" \
  --path "$save/checkpoint_best.pt" -s kjv -t web --detok moses --references "$data/raw/test.web" \
  --out-dir "$save" "${bench_options[@]}" "${edit_ratio[@]}"
