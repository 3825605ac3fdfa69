#!/usr/bin/env bash
# Train a draft head (the drafter that rides on the verifier) with fairseq-train, the verifier frozen.
#   scripts/train_draft_head.sh DATA_BIN VERIFIER.pt SAVE_DIR -s SRC -t TGT [--minutes M] [--block-size K]
#                               [--layers L] [--input-layers N] [--draft-vocab N] [--regression-weight W]
#                               [--max-tokens N] [--nproc N]
#                               [--recompute-states] [-- EXTRA_FAIRSEQ_TRAIN_ARGS...]
# DATA_BIN: binarized with the verifier's dictionaries, best its own greedy outputs on the train
#           sources (scripts/distill.sh ... --beam 1), which are what the head must predict
# --minutes M    stop after M minutes of wall clock (default 60)
# --block-size K tokens drafted per call (default 4); 1 trains a head that drafts autoregressively
#                (decoding calls it --draft-head-steps times per pass, feeding its output features back)
# --layers L     layers of the head (default 1)
# --input-layers N  the head reads the last token through the verifier's first N decoder layers (default 1;
#                0: its embedding, as heads trained before this option; draft_head --head-input-layers)
# --draft-vocab N  draft among the dictionary's N most frequent words, trained on those alone: a
#                training step and a drafting call project onto N words instead of all (default 0: all)
# --regression-weight W  weight of EAGLE's feature loss (draft_head_loss --state-regression-weight):
#                the slots' features pulled towards the verifier's states (default 10 with --block-size 1,
#                EAGLE's 1 : 0.1; else 0)
# --max-tokens N target-side batch size in tokens (default 2048)
# --recompute-states  run the frozen verifier on every batch of every epoch, instead of keeping each
#                training sentence's verifier states in memory after the first epoch
#                (--keep-verifier-states: (source + target tokens) x width x 4 bytes, 1.34 GiB for
#                LibreOffice En-De; refused above half the machine's memory)
# A finished training in SAVE_DIR (marked by SAVE_DIR/.trained) is reused; the log is SAVE_DIR/train.log.
# Decode with: fairseq-generate ... --task translation_pardec --gen-algo gad --drafter-path SAVE_DIR/checkpoint_last.pt
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,26p "$0" >&2; exit 2; }
data=$1 verifier=$2 save=$3; shift 3
src="" tgt="" minutes=60 block_size=4 layers=1 input_layers=1 draft_vocab=0 regression_weight="" max_tokens=2048
nproc=1 extra=()
keep_states=(--keep-verifier-states)
while [ $# -gt 0 ]; do
  case "$1" in
    -s) src=$2; shift 2 ;;
    -t) tgt=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --block-size) block_size=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --input-layers) input_layers=$2; shift 2 ;;
    --draft-vocab) draft_vocab=$2; shift 2 ;;
    --regression-weight) regression_weight=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --nproc) nproc=$2; shift 2 ;;
    --recompute-states) keep_states=(); shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "train_draft_head.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$src" ] && [ -n "$tgt" ] || { echo "train_draft_head.sh: -s SRC and -t TGT are required" >&2; exit 2; }
[ -f "$verifier" ] || { echo "train_draft_head.sh: verifier checkpoint $verifier not found" >&2; exit 1; }
[ -n "$regression_weight" ] || { regression_weight=0; [ "$block_size" != 1 ] || regression_weight=10; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$save"
if [ -f "$save/.trained" ]; then
  echo "train_draft_head.sh: reusing the head in $save (delete $save/.trained to train again)"
  exit 0
fi
args=("$data" --user-dir "$root/pardec_fairseq" --task translation_draft_head -s "$src" -t "$tgt"
  --verifier-path "$verifier" --block-size "$block_size" --draft-vocab "$draft_vocab" --arch draft_head
  --head-layers "$layers" --head-input-layers "$input_layers"
  --criterion draft_head_loss --state-regression-weight "$regression_weight"
  --optimizer adam --adam-betas "(0.9,0.98)" --lr 1e-3
  --lr-scheduler inverse_sqrt --warmup-updates 200 --max-tokens "$max_tokens" --max-epoch 100
  --stop-time-hours "$(python3 -c "print($minutes / 60)")" --save-dir "$save" --no-epoch-checkpoints
  --log-format simple --log-interval 20 --num-workers 0 --seed 1 "${keep_states[@]}" "${extra[@]}")
echo "train_draft_head.sh: training a $block_size-token head for $minutes minutes; log: $save/train.log"
source "$root/scripts/run_training.sh"
run_training train_draft_head.sh "$save" "$nproc" "${args[@]}"
