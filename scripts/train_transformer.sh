#!/usr/bin/env bash
# Train the autoregressive Transformer (the verifier of the plugin's algorithms) with fairseq-train.
#   scripts/train_transformer.sh DATA_BIN SAVE_DIR -s SRC -t TGT [--preset cpu|base|big] [--minutes M]
#                                [--max-tokens N] [--nproc N] [--init-from CKPT] [--warmup-updates N]
#                                [--dropout P]
#                                [-- EXTRA_FAIRSEQ_TRAIN_ARGS...]
# --preset cpu   3+3 layers, d_model 256, FFN 1024, 4 heads, pre-norm, lr 1.5e-3, 300 warm-up
#                updates (default; sized to learn fast on a 2-core CPU)
# --preset base  transformer-base (Vaswani et al.): 6+6 layers, d_model 512, FFN 2048, 8 heads,
#                lr 5e-4, 4000 warm-up updates
# --preset big   transformer-big (Vaswani et al.; fairseq's transformer_vaswani_wmt_en_de_big):
#                6+6 layers, d_model 1024, FFN 4096, 16 heads, dropout 0.3, lr 5e-4, 4000 warm-up updates
# --minutes M    stop after M minutes of wall clock (default: at most 100 epochs)
# --max-tokens N target-side batch size in tokens (default 4096; smaller gives more updates per minute)
# --nproc N      N training processes through scripts/train_distributed.sh
# --init-from C  start from the weights of checkpoint C (fairseq's --finetune-from-model: fresh
#                optimizer, schedule and meters); --minutes then counts this run only, where
#                fairseq's --stop-time-hours would count C's training time too
# --warmup-updates N  the learning rate's warm-up instead of the preset's (short runs learn sooner)
# --dropout P    dropout instead of the preset's (0.1; big: 0.3); a run of minutes sees less than an
#                epoch, where dropout only slows learning
# A finished training in SAVE_DIR (marked by SAVE_DIR/.trained) is reused; the log is SAVE_DIR/train.log.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,22p "$0" >&2; exit 2; }
data=$1 save=$2; shift 2
src="" tgt="" preset=cpu minutes="" max_tokens=4096 nproc=1 init_from="" warmup="" dropout_option="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -s) src=$2; shift 2 ;;
    -t) tgt=$2; shift 2 ;;
    --preset) preset=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --nproc) nproc=$2; shift 2 ;;
    --init-from) init_from=$2; shift 2 ;;
    --warmup-updates) warmup=$2; shift 2 ;;
    --dropout) dropout_option=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "train_transformer.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$src" ] && [ -n "$tgt" ] || { echo "train_transformer.sh: -s SRC and -t TGT are required" >&2; exit 2; }
dropout=0.1
case "$preset" in
  cpu) model=(--encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256
              --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024
              --encoder-attention-heads 4 --decoder-attention-heads 4
              --encoder-normalize-before --decoder-normalize-before --lr 1.5e-3 --warmup-updates 300) ;;
  base) model=(--lr 5e-4 --warmup-updates 4000) ;;
  big) model=(--encoder-layers 6 --decoder-layers 6 --encoder-embed-dim 1024 --decoder-embed-dim 1024
              --encoder-ffn-embed-dim 4096 --decoder-ffn-embed-dim 4096
              --encoder-attention-heads 16 --decoder-attention-heads 16 --lr 5e-4 --warmup-updates 4000)
       dropout=0.3 ;;
  *) echo "train_transformer.sh: --preset must be cpu, base or big" >&2; exit 2 ;;
esac
[ -z "$warmup" ] || model+=(--warmup-updates "$warmup")
[ -z "$dropout_option" ] || dropout=$dropout_option
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$save"
if [ -f "$save/.trained" ]; then
  echo "train_transformer.sh: reusing the model in $save (delete $save/.trained to train again)"
  exit 0
fi

args=("$data" --user-dir "$root/pardec_fairseq" --task translation_pardec -s "$src" -t "$tgt"
  --arch transformer "${model[@]}" --share-all-embeddings --dropout "$dropout"
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1
  --optimizer adam --adam-betas "(0.9,0.98)" --lr-scheduler inverse_sqrt --max-tokens "$max_tokens"
  --max-epoch 100 --save-dir "$save" --no-epoch-checkpoints
  --log-format simple --log-interval 10 --num-workers 0 --seed 1 "${extra[@]}")
previous_seconds=0
if [ -n "$init_from" ]; then
  [ -f "$init_from" ] || { echo "train_transformer.sh: --init-from $init_from: no such checkpoint" >&2; exit 2; }
  args+=(--finetune-from-model "$init_from")
  # fairseq carries the checkpoint's training time into the new run's clock
  previous_seconds=$("$root/.venv/bin/python" -c "
import sys, torch
from pardec_fairseq.checkpoint_safety import allow_fairseq_checkpoints
allow_fairseq_checkpoints()
state = torch.load(sys.argv[1], map_location='cpu', weights_only=True)
print(state.get('extra_state', {}).get('previous_training_time', 0))" "$init_from")
fi
[ -z "$minutes" ] || args+=(--stop-time-hours "$(python3 -c "print($minutes / 60 + $previous_seconds / 3600)")")

echo "train_transformer.sh: training the $preset Transformer${minutes:+ for $minutes minutes}; log: $save/train.log"
source "$root/scripts/run_training.sh"
run_training train_transformer.sh "$save" "$nproc" "${args[@]}"
