# Sourced by the training scripts: run_training NAME SAVE_DIR NPROC FAIRSEQ_TRAIN_ARGS...
# runs fairseq-train (through scripts/train_distributed.sh when NPROC > 1) into SAVE_DIR/train.log,
# printing its progress every 30 seconds, reports a failure with the log's last lines, prints the last
# validation and marks SAVE_DIR finished (SAVE_DIR/.trained, which the scripts reuse).

# report_progress NAME LOG PID SECONDS: until process PID ends, every SECONDS a line with the time so far
# and the updates and loss of LOG's latest training line (fairseq's simple log format)
report_progress() {
  local name=$1 log=$2 pid=$3 every=$4 start=$SECONDS progress i
  while kill -0 "$pid" 2>/dev/null; do
    for ((i = 0; i < every; i++)); do
      kill -0 "$pid" 2>/dev/null || return 0
      sleep 1
    done
    progress=$(grep -E "num_updates=[0-9]+" "$log" | tail -1 |
      sed -E "s/.* loss=([0-9.]+).*num_updates=([0-9]+).*/\2 updates, loss \1/") || true
    echo "$name: $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s, ${progress:-starting}"
  done
}

run_training() {
  local name=$1 save=$2 nproc=$3 root pid status=0
  shift 3
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [ "$nproc" -gt 1 ]; then
    bash "$root/scripts/train_distributed.sh" --nproc "$nproc" --log-dir "$save/logs" -- "$@" > "$save/train.log" 2>&1 &
  else
    "$root/.venv/bin/fairseq-train" "$@" > "$save/train.log" 2>&1 &
  fi
  pid=$!
  report_progress "$name" "$save/train.log" "$pid" 30
  wait "$pid" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "$name: fairseq-train failed; see $save/train.log" >&2
    tail -5 "$save/train.log" >&2
    return 1
  fi
  grep -E "\| valid on" "$save/train.log" | tail -1 | sed 's/.*| valid on/valid on/' | cut -c1-160
  touch "$save/.trained"
}
