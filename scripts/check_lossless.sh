#!/usr/bin/env bash
# Check that plugin algorithms reproduce fairseq's --beam 1 on every sentence of a split, through
# fairseq-generate itself, at several batch sizes.
#   scripts/check_lossless.sh DATA_BIN CHECKPOINT -s SRC -t TGT --gen-algo ALGO [--gen-algo ALGO2 ...]
#                             [--batch-sizes "1 16"] [--subset test] [--plugin-args "--drafter-path D.pt"]
#                             [-- EXTRA_FAIRSEQ_GENERATE_ARGS...]
# fairseq's reference is decoded once per batch size and compared with each algorithm. --plugin-args:
# options of the plugin's task (split at spaces), given to the algorithms' runs only; the arguments
# after -- go to every run. Prints one line per algorithm and batch size; exits 1 after the checks
# if any algorithm differed.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,10p "$0" >&2; exit 2; }
data=$1 checkpoint=$2; shift 2
src="" tgt="" algos=() batch_sizes="1 16" subset=test plugin_args=() extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -s) src=$2; shift 2 ;;
    -t) tgt=$2; shift 2 ;;
    --gen-algo) algos+=("$2"); shift 2 ;;
    --batch-sizes) batch_sizes=$2; shift 2 ;;
    --subset) subset=$2; shift 2 ;;
    --plugin-args) read -r -a plugin_args <<< "$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "check_lossless.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$src" ] && [ -n "$tgt" ] && [ ${#algos[@]} -gt 0 ] || {
  echo "check_lossless.sh: -s, -t and --gen-algo are required" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

generate() {  # fairseq-generate's hypotheses, one "id<TAB>tokens" line each, sorted by id
  "$root/.venv/bin/fairseq-generate" "$data" --path "$checkpoint" -s "$src" -t "$tgt" --gen-subset "$subset" \
    --user-dir "$root/pardec_fairseq" --required-batch-size-multiple 1 "${extra[@]}" "$@" 2> "$work/stderr" \
    | sed -n 's/^H-\([0-9]*\)\t[^\t]*\t/\1\t/p' | sort -n || { cat "$work/stderr" >&2; exit 1; }
}
# fairseq's reference at the same batch size: with --max-len-a > 0 fairseq's own output depends on
# the padded source width of the batch, and the plugin reproduces that too
failed=0
for batch_size in $batch_sizes; do
  generate --task translation --beam 1 --batch-size "$batch_size" > "$work/reference"
  total=$(wc -l < "$work/reference")
  for algo in "${algos[@]}"; do
    generate --task translation_pardec --gen-algo "$algo" --batch-size "$batch_size" "${plugin_args[@]}" \
      > "$work/candidate"
    if cmp -s "$work/reference" "$work/candidate"; then
      echo "$algo batch $batch_size: $total of $total hypotheses identical to fairseq --beam 1"
    else
      echo "$algo batch $batch_size: differs from fairseq --beam 1:" >&2
      { diff "$work/reference" "$work/candidate" || true; } | head -10 >&2  # head may close the pipe early
      failed=1
    fi
  done
done
exit $failed
