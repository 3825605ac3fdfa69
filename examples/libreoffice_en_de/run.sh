#!/usr/bin/env bash
# LibreOffice help En->De from raw data to results: prepare the data, train the autoregressive
# Transformer (the verifier of the plugin's algorithms), benchmark it.
#   examples/libreoffice_en_de/run.sh [--preset cpu|base] [--minutes M] [--nproc N] [--name NAME]
#       [--bench-sentences N] [--batch-size B] [--repetitions R] [--algorithms "greedy jacobi gs-jacobi hybrid-jacobi"] [--no-bench]
# Training options are those of scripts/train_transformer.sh (default: cpu preset, 60 minutes).
# Outputs go to runs/libreoffice_en_de/<NAME, default the preset>/: checkpoints, train.log and
# bench_b<batch size>.{md,json,png}.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
default_algorithms="greedy jacobi gs-jacobi hybrid-jacobi"
source "$root/scripts/recipe_options.sh" "$@"
data="$root/data/libreoffice_en_de"
save="$root/runs/libreoffice_en_de/${name:-$preset}"

bash "$root/examples/libreoffice_en_de/prepare.sh" "$data"
bash "$root/scripts/train_transformer.sh" "$data/bin" "$save" -s en -t de "${train_options[@]}"
[ "$bench" -eq 0 ] || "$root/.venv/bin/python" "$root/scripts/bench.py" "$data/bin" \
  --path "$save/checkpoint_best.pt" -s en -t de --references "$data/raw/test.de" \
  --out-dir "$save" "${bench_options[@]}"
