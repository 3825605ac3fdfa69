#!/usr/bin/env bash
# English GEC (BEA-2019 restricted training data, CoNLL-2014 test) from the official archives to
# results, as Ge et al. 2022 (IAD) evaluate it: prepare the data (prepare.sh) -> train the
# Transformer (transformer-base by default; Ge et al.: --preset big) -> benchmark greedy and IAD
# beside fairseq's greedy and beam search on CoNLL-2014 (BLEU and GLEU against both annotators; at
# batch size 1 also the speedup by edit ratio) -> F0.5 of the M2 scorer: fairseq-generate decodes the
# whole test set with fairseq's greedy search and with each plugin algorithm, m2scorer.py scores each
# against official-2014.combined.m2 and the table says how many outputs are identical to fairseq's.
#   examples/bea19_gec/run.sh [--raw-dir DIR] [--bpe-merges N] [--preset cpu|base|big] [--minutes M]
#       [--max-tokens N] [--nproc N] [--name NAME] [--bench-sentences N] [--batch-size B] [--repetitions R]
#       [--algorithms "greedy iad"] [--ctranslate2] [--threads "1 2"] [--no-bench]
# --no-bench: train only (no benchmark, no M2 scores). Training runs --minutes of wall clock (default
# 60). Without network, --raw-dir DIR names the folder of the archives (prepare.sh says which).
# Outputs go to runs/bea19_gec/<NAME, default the preset>/: checkpoints, train.log,
# bench_b<B>.{md,json,png}, conll14/ (the fairseq-generate logs) and conll14_m2.md (the F0.5 table).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
default_preset=base
default_algorithms="greedy iad"
prepare_options=() data_name=bea19_gec shared=()
while [ $# -gt 0 ]; do
  case "$1" in
    --raw-dir) prepare_options+=(--raw-dir "$2"); shift 2 ;;
    --bpe-merges) prepare_options+=(--bpe-merges "$2"); data_name="bea19_gec_bpe$2"; shift 2 ;;
    *) shared+=("$1"); shift ;;
  esac
done
source "$root/scripts/recipe_options.sh" "${shared[@]}"
data="$root/data/$data_name"
save="$root/runs/$data_name/${name:-$preset}"
python="$root/.venv/bin/python"

bash "$root/examples/bea19_gec/prepare.sh" "${prepare_options[@]}" "$data"
bash "$root/scripts/train_transformer.sh" "$data/bin" "$save" -s src -t tgt "${train_options[@]}"
[ "$bench" -eq 1 ] || exit 0
# the text is tokenized as the M2 files are: outputs are only de-BPE'd (--detok space)
references=("$data"/raw/test.tgt*)
edit_ratio=(); [ "$batch_size" -ne 1 ] || edit_ratio=(--edit-ratio)
"$python" "$root/scripts/bench.py" "$data/bin" --path "$save/checkpoint_best.pt" -s src -t tgt \
  --detok space --gec --sources "$data/raw/test.src" --references "${references[@]}" --out-dir "$save" \
  "${bench_options[@]}" "${edit_ratio[@]}"

# M2 scores of the whole test set: fairseq's greedy search, then each algorithm (NAME:option=value,...)
mkdir -p "$save/conll14"
logs=()
generate() {  # generate NAME [FAIRSEQ-GENERATE OPTIONS]: decode the test split into conll14/NAME.log
  local log="$save/conll14/${1//[:,=]/_}.log"
  logs+=(--log "$1" "$log")
  echo "bea19_gec: decoding CoNLL-2014 with $1 (log: $log)"
  shift
  "$root/.venv/bin/fairseq-generate" "$data/bin" --user-dir "$root/pardec_fairseq" --task translation_pardec \
    --gen-subset test --path "$save/checkpoint_best.pt" -s src -t tgt --beam 1 --batch-size 32 \
    --max-len-a 1.2 --max-len-b 10 --remove-bpe "$@" > "$log" 2> "$log.err" || {
    echo "bea19_gec: fairseq-generate failed; the end of $log.err:" >&2; tail -5 "$log.err" >&2; exit 1; }
}
generate fairseq-greedy
for spec in "${algorithms[@]}"; do
  options=(--gen-algo "${spec%%:*}")
  if [[ "$spec" == *:* ]]; then
    IFS=, read -ra settings <<< "${spec#*:}"
    for setting in "${settings[@]}"; do options+=("--${setting%%=*}" "${setting#*=}"); done
  fi
  generate "$spec" "${options[@]}"
done
"$python" "$root/examples/bea19_gec/m2_table.py" "$data/raw/test.m2" "${logs[@]}" --out "$save/conll14_m2.md"
echo "written: $save/conll14_m2.md"
