#!/usr/bin/env bash
# LibreOffice help En->De from raw data to results: prepare the data, train the autoregressive
# Transformer (the verifier of the plugin's algorithms), benchmark it; with --gad, the pipeline of
# generalized aggressive decoding on top (Xia et al. 2022): the Transformer is the teacher ->
# sequence-level distillation of the training set -> a verifier (the teacher fine-tuned on the
# distilled targets) and a block_nat drafter (initialised from the verifier) trained on them ->
# benchmark of gad and gad++ on the verifier. With --draft-head, a draft head on the Transformer itself
# (frozen): the Transformer's own greedy outputs of the training set -> the head trained on them for
# --head-minutes -> benchmark of greedy and gad with the head.
#   examples/libreoffice_en_de/run.sh [--preset cpu|base] [--minutes M] [--nproc N] [--name NAME]
#       [--bench-sentences N] [--batch-size B] [--repetitions R] [--algorithms "greedy jacobi gs-jacobi hybrid-jacobi"] [--no-bench]
#       [--gad [--distill-beam 5] [--verifier-minutes 20] [--drafter-minutes 30] [--block-size 10]
#        [--context-window 0] [--soft-copy] [--gad-algorithms "gad gad++ gad++:gad-top-beta=5,gad-tau=3.0"]]
#       [--draft-head [--head-minutes 60] [--head-block-size 1] [--head-layers 1] [--head-input-layers 1]
#        [--head-draft-vocab 4096]
#        [--head-distill-beam 1] [--head-algorithms "gad ..."] [--head-compare [--compare-block-size 4]]]
# Training options are those of scripts/train_transformer.sh (default: cpu preset, 60 minutes).
# Outputs go to runs/libreoffice_en_de/<NAME, default the preset>/: checkpoints, train.log and
# bench_b<batch size>.{md,json,png}; with --gad also distilled_beam<B>/ (the distilled data),
# gad/verifier/, gad/drafter_k<K>_w<W>/ and gad/bench_k<K>_w<W>_b<batch size>.{md,json,png} (with
# --soft-copy, a drafter that soft-copies the source into its slots: k<K>_w<W>_copy in both names);
# with --draft-head also self_distilled/ (the greedy outputs), head_k<K>_l<L>_in<I>_v<N>_m<M>/ and
# head_k<K>_l<L>_in<I>_v<N>_m<M>/bench_b<batch size>.{md,json,png} (head_k<K>_l<L>_in<I>_m<M>/ with
# --head-draft-vocab 0: a head drafting among all words rather than the 4,096 most frequent); with
# --head-compare also block_nat_k<K>_m<M>/ and bpd_k<K>_m<M>/: GAD's block drafter and frozen BPD heads
# trained as long on the same outputs, each with its benchmark (scripts/draft_head_recipe.sh); with
# --head-distill-beam B > 1 they learn the Transformer's beam-B outputs instead (beam<B>_distilled/, folders
# ..._b<B>_m<M>/: a head for gad++).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
default_algorithms="greedy jacobi gs-jacobi hybrid-jacobi"
# the draft head's options go to scripts/draft_head_recipe.sh, later ones overriding these
source "$root/scripts/draft_head_options.sh" --head-draft-vocab 4096 \
  --head-algorithms "gad gad:draft-vocab=512,draft-shortlist=40"
gad=0 distill_beam=5 verifier_minutes=20 drafter_minutes=30 block_size=10 context_window=0
gad_algorithms="gad gad++ gad++:gad-top-beta=5,gad-tau=3.0"
soft_copy=()
shared=()
while [ $# -gt 0 ]; do
  take_draft_head_option "$@"
  [ "$head_words" -eq 0 ] || { shift "$head_words"; continue; }
  case "$1" in
    --gad) gad=1; shift ;;
    --distill-beam) distill_beam=$2; shift 2 ;;
    --verifier-minutes) verifier_minutes=$2; shift 2 ;;
    --drafter-minutes) drafter_minutes=$2; shift 2 ;;
    --block-size) block_size=$2; shift 2 ;;
    --context-window) context_window=$2; shift 2 ;;
    --soft-copy) soft_copy=(--soft-copy); shift ;;
    --gad-algorithms) gad_algorithms=$2; shift 2 ;;
    *) shared+=("$1"); shift ;;
  esac
done
source "$root/scripts/recipe_options.sh" "${shared[@]}"
data="$root/data/libreoffice_en_de"
save="$root/runs/libreoffice_en_de/${name:-$preset}"
python="$root/.venv/bin/python"

bash "$root/examples/libreoffice_en_de/prepare.sh" "$data"
bash "$root/scripts/train_transformer.sh" "$data/bin" "$save" -s en -t de "${train_options[@]}"
[ "$bench" -eq 0 ] || "$python" "$root/scripts/bench.py" "$data/bin" \
  --path "$save/checkpoint_best.pt" -s en -t de --references "$data/raw/test.de" \
  --out-dir "$save" "${bench_options[@]}"
run_draft_head_recipe "$data" "$save" en de
[ "$gad" -eq 1 ] || exit 0

distilled="$save/distilled_beam$distill_beam"
if [ ! -f "$distilled/.done" ]; then
  bash "$root/scripts/distill.sh" "$data/bin" "$save/checkpoint_best.pt" "$distilled" -s en -t de \
    --beam "$distill_beam"
  touch "$distilled/.done"
fi
# the teacher's architecture throughout: the verifier starts from the teacher, the drafter from the
# verifier (the same parameters; its decoder then learns to attend both ways and fill mask slots).
# Both keep their last checkpoint: validation scores the raw references, which a model fitting the
# teacher's outputs matches less and less, so the "best" one would be the least distilled.
verifier="$save/gad/verifier"
bash "$root/scripts/train_transformer.sh" "$distilled" "$verifier" -s en -t de --preset "$preset" \
  --minutes "$verifier_minutes" --max-tokens "$max_tokens" --nproc "$nproc" \
  --init-from "$save/checkpoint_best.pt" -- --lr 5e-4 --warmup-updates 100
drafter_name="k${block_size}_w$context_window${soft_copy:+_copy}"
drafter="$save/gad/drafter_$drafter_name"
bash "$root/scripts/train_transformer.sh" "$distilled" "$drafter" -s en -t de --preset "$preset" \
  --minutes "$drafter_minutes" --max-tokens "$max_tokens" --nproc "$nproc" \
  --init-from "$verifier/checkpoint_last.pt" -- --task translation_block_nat --arch block_nat \
  --criterion glat_block_loss --block-size "$block_size" --context-window "$context_window" "${soft_copy[@]}" \
  --lr 5e-4 --warmup-updates 100 --glat-anneal-updates 2000
[ "$bench" -eq 0 ] || { read -ra gad_runs <<< "$gad_algorithms"
  "$python" "$root/scripts/bench.py" "$data/bin" --path "$verifier/checkpoint_last.pt" -s en -t de \
    --drafter-path "$drafter/checkpoint_last.pt" --references "$data/raw/test.de" --out-dir "$save/gad" \
    "${bench_options[@]}" --algorithms greedy "${gad_runs[@]}" --profile \
    --name "bench_${drafter_name}_b$batch_size"; }
