#!/usr/bin/env bash
# The draft-head steps of a translation recipe (run.sh --draft-head), on its trained Transformer, which
# stays frozen: the Transformer's own greedy outputs of the training and valid sets (scripts/distill.sh
# --beam 1 --valid, into SAVE_DIR/self_distilled/: validation scores the drafts decoding keeps), a draft
# head trained on them (scripts/train_draft_head.sh, into SAVE_DIR/head_k<K>_l<L>_in<I>_m<M>/,
# head_k<K>_l<L>_in<I>_v<N>_m<M>/ with --draft-vocab N), then the benchmark of greedy and ALGORITHMS with the
# head, into that folder (bench_b<batch size>.{md,json,png}, named by the recipe's bench options). With
# --head-compare, the other two drafters at equal training time: for the same minutes on the same
# outputs, GAD's block_nat drafter (initialised from the Transformer, --compare-block-size slots) into
# SAVE_DIR/block_nat_k<K>_m<M>/ and as many frozen BPD heads on the Transformer (head 1 is the
# Transformer itself) into SAVE_DIR/bpd_k<K>_m<M>/, each benchmarked there beside greedy (gad with the
# drafter; bpd). With --head-distill-beam B > 1 every drafter learns the Transformer's beam-B outputs
# instead (SAVE_DIR/beam<B>_distilled/, folders named ..._b<B>_m<M>/): a head for gad++, whose relaxed
# acceptance then leans towards beam search (on LibreOffice BLEU 25.66 with beam 5, 25.36 learning the greedy
# outputs, greedy's 25.46, neither difference significant; exact gad keeps as many tokens either way:
# docs/results.md, stop 67).
#   scripts/draft_head_recipe.sh DATA_BIN SAVE_DIR -s SRC -t TGT --references REF [--head-minutes 60]
#       [--head-block-size 1] [--head-layers 1] [--head-input-layers 1] [--head-draft-vocab 0]
#       [--head-distill-beam 1]
#       [--head-algorithms "gad"] [--head-compare [--compare-block-size 4]] [--preset cpu] [--nproc 1] [--no-bench]
#       [-- BENCH_OPTIONS...]
# The --head-* options are the recipes' own (run.sh --draft-head passes them on as given): minutes of
# training, tokens drafted per call (1, the default: a one-slot head drafting autoregressively, 3 steps
# per pass, the best measured on LibreOffice; docs/results.md), layers, the verifier's decoder layers the head
# reads the last token through (train_draft_head.sh --input-layers), words drafted among (0: all; see
# train_draft_head.sh --draft-vocab), the algorithms benchmarked with the head and the comparison.
# --compare-block-size: the compared drafters' slots (heads), which draft in one call. --preset: the
# Transformer's (scripts/train_transformer.sh), which the compared drafters are built like.
# SAVE_DIR holds the Transformer (checkpoint_best.pt); BENCH_OPTIONS (the recipe's: batch size, name,
# repetitions, ...) go to scripts/bench.py before --algorithms.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,30p "$0" >&2; exit 2; }
data=$1 save=$2; shift 2
src="" tgt="" references="" minutes=60 block_size=1 layers=1 input_layers=1 draft_vocab=0 nproc=1 algorithms="gad"
bench=1
compare=0 compare_block_size=4 preset=cpu distill_beam=1
bench_options=()
while [ $# -gt 0 ]; do
  case "$1" in
    -s) src=$2; shift 2 ;;
    -t) tgt=$2; shift 2 ;;
    --references) references=$2; shift 2 ;;
    --head-minutes) minutes=$2; shift 2 ;;
    --head-block-size) block_size=$2; shift 2 ;;
    --head-layers) layers=$2; shift 2 ;;
    --head-input-layers) input_layers=$2; shift 2 ;;
    --head-draft-vocab) draft_vocab=$2; shift 2 ;;
    --head-distill-beam) distill_beam=$2; shift 2 ;;
    --head-algorithms) algorithms=$2; shift 2 ;;
    --head-compare) compare=1; shift ;;
    --compare-block-size) compare_block_size=$2; shift 2 ;;
    --preset) preset=$2; shift 2 ;;
    --nproc) nproc=$2; shift 2 ;;
    --no-bench) bench=0; shift ;;
    --) shift; bench_options=("$@"); break ;;
    *) echo "draft_head_recipe.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$src" ] && [ -n "$tgt" ] && [ -n "$references" ] || {
  echo "draft_head_recipe.sh: -s SRC, -t TGT and --references REF are required" >&2; exit 2; }
[[ "$distill_beam" =~ ^[1-9][0-9]*$ ]] || {
  echo "draft_head_recipe.sh: --head-distill-beam takes a beam size, 1 (the Transformer's greedy outputs) or more," \
    "not $distill_beam" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
verifier="$save/checkpoint_best.pt"

# what the drafters learn: the Transformer's greedy outputs (what exact acceptance keeps) or its beam search's
targets="$save/self_distilled" beam=""
[ "$distill_beam" = 1 ] || { targets="$save/beam${distill_beam}_distilled"; beam="_b$distill_beam"; }
if [ ! -f "$targets/.done" ]; then
  bash "$root/scripts/distill.sh" "$data" "$verifier" "$targets" -s "$src" -t "$tgt" --beam "$distill_beam" --valid
  touch "$targets/.done"
fi
vocab=""; [ "$draft_vocab" = 0 ] || vocab="_v$draft_vocab"
head="$save/head_k${block_size}_l${layers}_in${input_layers}${vocab}${beam}_m$minutes"
bash "$root/scripts/train_draft_head.sh" "$targets" "$verifier" "$head" -s "$src" -t "$tgt" \
  --minutes "$minutes" --block-size "$block_size" --layers "$layers" --input-layers "$input_layers" \
  --draft-vocab "$draft_vocab" --nproc "$nproc"
benchmark() {  # benchmark OUT_DIR BENCH_ARGS...: the recipe's benchmark, into OUT_DIR
  local out=$1; shift
  [ "$bench" -eq 0 ] || "$root/.venv/bin/python" "$root/scripts/bench.py" "$data" -s "$src" -t "$tgt" \
    --references "$references" --out-dir "$out" "${bench_options[@]}" "$@"
}
read -ra head_runs <<< "$algorithms"
benchmark "$head" --path "$verifier" --drafter-path "$head/checkpoint_last.pt" --algorithms greedy "${head_runs[@]}"
[ "$compare" -eq 1 ] || exit 0

# the compared drafters keep their last checkpoint, as the head does (equal training time)
block_nat="$save/block_nat_k${compare_block_size}${beam}_m$minutes"
bash "$root/scripts/train_transformer.sh" "$targets" "$block_nat" -s "$src" -t "$tgt" --preset "$preset" \
  --minutes "$minutes" --nproc "$nproc" --init-from "$verifier" -- --task translation_block_nat --arch block_nat \
  --criterion glat_block_loss --block-size "$compare_block_size" --context-window 0 --lr 5e-4 --warmup-updates 100 \
  --glat-anneal-updates 2000
benchmark "$block_nat" --path "$verifier" --drafter-path "$block_nat/checkpoint_last.pt" --algorithms greedy gad
bpd="$save/bpd_k${compare_block_size}${beam}_m$minutes"
bash "$root/scripts/train_transformer.sh" "$targets" "$bpd" -s "$src" -t "$tgt" --preset "$preset" \
  --minutes "$minutes" --nproc "$nproc" -- --arch blockwise_transformer --block-heads "$compare_block_size" \
  --init-base-from "$verifier" --identity-first-head --freeze-base --criterion blockwise_cross_entropy \
  --label-smoothing 0.1 --warmup-updates 100
benchmark "$bpd" --path "$bpd/checkpoint_last.pt" --algorithms greedy bpd
