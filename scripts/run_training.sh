# Sourced by the training scripts: run_training NAME SAVE_DIR NPROC FAIRSEQ_TRAIN_ARGS...
# runs fairseq-train (through scripts/train_distributed.sh when NPROC > 1) into SAVE_DIR/train.log,
# reports a failure with the log's last lines, prints the last validation and marks SAVE_DIR finished
# (SAVE_DIR/.trained, which the scripts reuse).
run_training() {
  local name=$1 save=$2 nproc=$3 root
  shift 3
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [ "$nproc" -gt 1 ]; then
    bash "$root/scripts/train_distributed.sh" --nproc "$nproc" --log-dir "$save/logs" -- "$@" > "$save/train.log" 2>&1
  else
    "$root/.venv/bin/fairseq-train" "$@" > "$save/train.log" 2>&1
  fi || { echo "$name: fairseq-train failed; see $save/train.log" >&2; tail -5 "$save/train.log" >&2; return 1; }
  grep -E "\| valid on" "$save/train.log" | tail -1 | sed 's/.*| valid on/valid on/' | cut -c1-160
  touch "$save/.trained"
}
