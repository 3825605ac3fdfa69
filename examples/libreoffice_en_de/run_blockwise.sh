#!/usr/bin/env bash
# Blockwise parallel decoding on LibreOffice help En->De (Stern et al. 2018, Table 1 at CPU scale):
# teacher -> sequence-level distillation -> blockwise-head models for each number of heads k, with
# the teacher's parameters frozen (only the heads train; head 1 is the teacher, so the output is
# the teacher's) or fine-tuned (everything trains), on the raw or the distilled targets -> for each
# model the benchmark (exact, top-2 and top-3 acceptance and exact with drafts refined by an n-gram
# model of the heads' training targets, one and four per pass, and one per pass from head 2 alone,
# beside fairseq greedy and beam 5 and the plugin's greedy) and the heads' analysis, then one table of
# them all.
#   examples/libreoffice_en_de/run_blockwise.sh [--heads "2 4 6 8 10"] [--modes "frozen fine-tuned"]
#       [--targets "raw distilled"] [--minutes M] [--teacher-minutes M] [--distill-beam B]
#       [--bench-sentences N] [--batch-size B] [--fine-tune-lr LR]
# --minutes is per blockwise model (default 10); the teacher is runs/libreoffice_en_de/cpu, trained
# by run.sh for --teacher-minutes (default 60) if it is not there. --fine-tune-lr LR: the fine-tuned
# models' learning rate (default: the preset's, 1.5e-3). Outputs: runs/libreoffice_en_de/blockwise/<targets>_<mode>_k<k>/ (<targets>_fine-tuned_lr<LR>_k<k>/
# with --fine-tune-lr; checkpoints, bench_b<B>.md, heads.md/png) and runs/libreoffice_en_de/blockwise/table.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
heads="2 4 6 8 10" modes="frozen fine-tuned" targets="raw distilled" minutes=10 teacher_minutes=60
distill_beam=5 bench_sentences="" batch_size=1 fine_tune_lr=""
while [ $# -gt 0 ]; do
  case "$1" in
    --heads) heads=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --teacher-minutes) teacher_minutes=$2; shift 2 ;;
    --distill-beam) distill_beam=$2; shift 2 ;;
    --bench-sentences) bench_sentences=$2; shift 2 ;;
    --batch-size) batch_size=$2; shift 2 ;;
    --fine-tune-lr) fine_tune_lr=$2; shift 2 ;;
    *) echo "run_blockwise.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
for mode in $modes; do
  case "$mode" in frozen|fine-tuned) ;; *) echo "run_blockwise.sh: --modes takes frozen and fine-tuned" >&2; exit 2 ;; esac
done
for target in $targets; do
  case "$target" in raw|distilled) ;; *) echo "run_blockwise.sh: --targets takes raw and distilled" >&2; exit 2 ;; esac
done
data="$root/data/libreoffice_en_de"
teacher_dir="$root/runs/libreoffice_en_de/cpu"
out="$root/runs/libreoffice_en_de/blockwise"
python="$root/.venv/bin/python"

bash "$root/examples/libreoffice_en_de/run.sh" --minutes "$teacher_minutes" --no-bench
teacher="$teacher_dir/checkpoint_best.pt"
distilled="$teacher_dir/distilled_beam$distill_beam"  # shared with run.sh --gad
if [[ " $targets " == *" distilled "* ]] && [ ! -f "$distilled/.done" ]; then
  bash "$root/scripts/distill.sh" "$data/bin" "$teacher" "$distilled" -s en -t de --beam "$distill_beam"
  touch "$distilled/.done"
fi

bench_limit=()
[ -z "$bench_sentences" ] || bench_limit=(--max-sentences "$bench_sentences")
for target in $targets; do
  train_data="$data/bin"
  [ "$target" = raw ] || train_data="$distilled"
  # refinement's n-grams come from the targets the heads learnt: the distilled outputs where they
  # trained on those (the demo's frozen heads: 1.75 tokens per pass against 1.49, docs/results.md)
  ngram="refine=ngram,refine-corpus=$train_data/train.en-de.de"
  for mode in $modes; do
    for k in $heads; do
      save="$out/${target}_${mode}_k$k"
      # the teacher's architecture (the cpu preset) with k heads on top, starting from its weights;
      # a short warm-up, as the base is trained already and a CPU budget buys few updates
      blockwise=(--arch blockwise_transformer --block-heads "$k" --init-base-from "$teacher"
                 --criterion blockwise_cross_entropy --label-smoothing 0.1 --warmup-updates 100)
      if [ "$mode" = frozen ]; then
        blockwise+=(--identity-first-head --freeze-base)
      elif [ -n "$fine_tune_lr" ]; then
        blockwise+=(--lr "$fine_tune_lr")  # after the preset's --lr, so fairseq-train takes it
        save="$out/${target}_${mode}_lr${fine_tune_lr}_k$k"
      fi
      bash "$root/scripts/train_transformer.sh" "$train_data" "$save" -s en -t de --preset cpu \
        --minutes "$minutes" -- "${blockwise[@]}"
      "$python" "$root/scripts/bench.py" "$data/bin" --path "$save/checkpoint_best.pt" -s en -t de \
        --references "$data/raw/test.de" --max-len-a 1.2 --max-len-b 10 --repetitions 1 \
        --batch-size "$batch_size" "${bench_limit[@]}" --out-dir "$save" --name "bench_b$batch_size" \
        --algorithms greedy bpd bpd:acceptance=top-k,acceptance-top-k=2 bpd:acceptance=top-k,acceptance-top-k=3 \
        "bpd:$ngram" "bpd:$ngram,refine-drafts=4" "bpd:$ngram,bpd-heads=2"
      "$python" "$root/scripts/analyze_heads.py" "$data/bin" --path "$save/checkpoint_best.pt" -s en -t de \
        --max-len-a 1.2 --max-len-b 10 "${bench_limit[@]}" --out-dir "$save" --name heads > /dev/null
    done
  done
done
"$python" "$root/scripts/blockwise_table.py" "$out" --batch-size "$batch_size" > "$out/table.md"
cat "$out/table.md"
