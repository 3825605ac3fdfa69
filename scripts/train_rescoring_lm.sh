#!/usr/bin/env bash
# Train the small target-side language model of bpd --refine neural (Kim et al. 2024's local neural
# rescoring): fairseq's transformer_lm on the target side of a translation data folder, one sentence
# per sample read after EOS (the plugin's task target_language_modeling), in the translation model's
# target dictionary (so its token ids are the verifier's).
#   scripts/train_rescoring_lm.sh DATA_BIN SAVE_DIR -s SRC -t TGT [--minutes M] [--layers L]
#                                 [--embed-dim D] [--max-tokens N] [-- EXTRA_FAIRSEQ_TRAIN_ARGS...]
# DATA_BIN: binarized with the verifier's dictionaries (its train and valid splits' target sides are
#           the LM's; a distilled folder works too)
# --minutes M    stop after M minutes of wall clock (default 10)
# --layers L     decoder layers (default 2); --embed-dim D model width (default 256, FFN 4 D, D / 64 heads)
# --max-tokens N tokens per batch (default 4096)
# A finished training in SAVE_DIR (marked by SAVE_DIR/.trained) is reused; the log is SAVE_DIR/train.log.
# Decode with: fairseq-generate ... --gen-algo bpd --refine neural --refine-lm-path SAVE_DIR/checkpoint_best.pt
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,14p "$0" >&2; exit 2; }
data=$1 save=$2; shift 2
src="" tgt="" minutes=10 layers=2 embed_dim=256 max_tokens=4096 extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -s) src=$2; shift 2 ;;
    -t) tgt=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --embed-dim) embed_dim=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "train_rescoring_lm.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$src" ] && [ -n "$tgt" ] || { echo "train_rescoring_lm.sh: -s SRC and -t TGT are required" >&2; exit 2; }
for split in train valid; do
  [ -f "$data/$split.$src-$tgt.$tgt.bin" ] || {
    echo "train_rescoring_lm.sh: $data/$split.$src-$tgt.$tgt.bin not found (binarize the data first)" >&2; exit 1; }
done
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$save"
if [ -f "$save/.trained" ]; then
  echo "train_rescoring_lm.sh: reusing the model in $save (delete $save/.trained to train again)"
  exit 0
fi
args=("$data" --user-dir "$root/pardec_fairseq" --task target_language_modeling -s "$src" -t "$tgt"
  --arch transformer_lm --decoder-layers "$layers"
  --decoder-embed-dim "$embed_dim" --decoder-input-dim "$embed_dim" --decoder-output-dim "$embed_dim"
  --decoder-ffn-embed-dim $((4 * embed_dim))
  --decoder-attention-heads $((embed_dim / 64)) --decoder-normalize-before --share-decoder-input-output-embed
  --tokens-per-sample 256 --skip-invalid-size-inputs-valid-test --dropout 0.1 --criterion cross_entropy
  --optimizer adam --adam-betas "(0.9,0.98)" --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 200
  --max-tokens "$max_tokens" --max-epoch 100 --stop-time-hours "$(python3 -c "print($minutes / 60)")"
  --save-dir "$save" --no-epoch-checkpoints --log-format simple --log-interval 10 --num-workers 0 --seed 1
  "${extra[@]}")
echo "train_rescoring_lm.sh: training a $layers-layer target-side LM for $minutes minutes; log: $save/train.log"
source "$root/scripts/run_training.sh"
run_training train_rescoring_lm.sh "$save" 1 "${args[@]}"
