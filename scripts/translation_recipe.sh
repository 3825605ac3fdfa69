#!/usr/bin/env bash
# The run.sh of the translation recipes built from official archives (examples/wmt14_en_de,
# examples/wmt16_en_ro): prepare the data (examples/NAME/prepare.sh) -> train the Transformer, the
# verifier (default preset base) -> benchmark it -> with --draft-head, a draft head on it
# (scripts/draft_head_recipe.sh: self-distillation with distill.sh --beam 1, train_draft_head.sh)
# and the benchmark of greedy and the head's algorithms.
#   scripts/translation_recipe.sh NAME SRC TGT [OPTIONS...]
# OPTIONS: those of scripts/recipe_options.sh; --raw-dir DIR and --bpe-merges N for prepare.sh (with
# --bpe-merges, data and models go to data/NAME_bpe<N>/ and runs/NAME_bpe<N>/); --draft-head with
# --head-minutes M (60), --head-block-size K (1: a one-slot head drafting 3 steps), --head-layers L (1),
# --head-input-layers N (1),
# --head-draft-vocab N (0: all words; see train_draft_head.sh --draft-vocab), --head-distill-beam B (1: the
# head learns the Transformer's greedy outputs; B > 1: its beam-B outputs, for gad++), --head-algorithms "..." (gad;
# with K > 1 "gad:refine=ngram,refine-drafts=4" chooses drafts from the head's top-4 lattice by an n-gram
# model of the training targets), --head-compare (also GAD's block drafter and frozen BPD heads,
# --compare-block-size K (4) slots, trained as long, each benchmarked).
# Outputs: data/NAME/, runs/NAME/<NAME option, default the preset>/ (checkpoints, train.log,
# bench_b<B>.{md,json,png}; with --draft-head self_distilled/ and head_k<K>_l<L>_in<I>[_v<N>]_m<M>/).
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,17p "$0" >&2; exit 2; }
recipe=$1 src=$2 tgt=$3; shift 3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
default_preset=base
default_algorithms="greedy lookahead retrieval hybrid-jacobi"
prepare_options=() data_name=$recipe
# the draft head's options go to scripts/draft_head_recipe.sh, later ones overriding these
source "$root/scripts/draft_head_options.sh" --head-algorithms gad
shared=()
while [ $# -gt 0 ]; do
  take_draft_head_option "$@"
  [ "$head_words" -eq 0 ] || { shift "$head_words"; continue; }
  case "$1" in
    --raw-dir) prepare_options+=(--raw-dir "$2"); shift 2 ;;
    --bpe-merges) prepare_options+=(--bpe-merges "$2"); data_name="${recipe}_bpe$2"; shift 2 ;;
    *) shared+=("$1"); shift ;;
  esac
done
source "$root/scripts/recipe_options.sh" "${shared[@]}"
data="$root/data/$data_name"
save="$root/runs/$data_name/${name:-$preset}"

bash "$root/examples/$recipe/prepare.sh" "${prepare_options[@]}" "$data"
bash "$root/scripts/train_transformer.sh" "$data/bin" "$save" -s "$src" -t "$tgt" "${train_options[@]}"
[ "$bench" -eq 0 ] || "$root/.venv/bin/python" "$root/scripts/bench.py" "$data/bin" \
  --path "$save/checkpoint_best.pt" -s "$src" -t "$tgt" --references "$data/raw/test.$tgt" \
  --out-dir "$save" "${bench_options[@]}"
run_draft_head_recipe "$data" "$save" "$src" "$tgt"
