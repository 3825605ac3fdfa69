#!/usr/bin/env bash
# fairseq-train on several processes, on one machine or several, with torch.distributed.
#   scripts/train_distributed.sh --nproc N [--nnodes M --node-rank R] [--master HOST:PORT]
#                                [--backend gloo|nccl] [--log-dir DIR] -- FAIRSEQ_TRAIN_ARGS...
# Run the same command on every node, changing only --node-rank. gloo (the default without a GPU)
# trains on CPUs, nccl on GPUs (one process per GPU). On CPU fairseq 0.12 works only with one
# process per rank, --distributed-no-spawn and --ddp-backend legacy_ddp, which this script sets.
set -euo pipefail
nproc=1 nnodes=1 node_rank=0 master=127.0.0.1:29533 log_dir=""
backend=$(python3 -c 'import torch; print("nccl" if torch.cuda.is_available() else "gloo")' 2>/dev/null || echo gloo)
while [ $# -gt 0 ]; do
  case "$1" in
    --nproc) nproc=$2; shift 2 ;;
    --nnodes) nnodes=$2; shift 2 ;;
    --node-rank) node_rank=$2; shift 2 ;;
    --master) master=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --log-dir) log_dir=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "train_distributed.sh: unknown option $1 (fairseq-train arguments go after --)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "train_distributed.sh: give fairseq-train's arguments after --" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python="$root/.venv/bin/python"
[ -x "$python" ] || python=python3
# fairseq-train, closing the process group before exit (see pardec_fairseq/cli/train_rank.py)
train=("$python" -m pardec_fairseq.cli.train_rank)
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
world=$((nproc * nnodes))
case "$backend" in
  gloo) device_flags=(--cpu --ddp-backend legacy_ddp) ;;
  nccl) device_flags=() ;;
  *) echo "train_distributed.sh: --backend must be gloo or nccl" >&2; exit 2 ;;
esac
[ -z "$log_dir" ] || mkdir -p "$log_dir"

pids=()
for ((local_rank = 0; local_rank < nproc; local_rank++)); do
  rank=$((node_rank * nproc + local_rank))
  device_id=$([ "$backend" = nccl ] && echo "$local_rank" || echo 0)
  command=("${train[@]}" "$@" "${device_flags[@]}" --distributed-backend "$backend"
           --distributed-init-method "tcp://$master" --distributed-world-size "$world"
           --distributed-rank "$rank" --distributed-no-spawn --device-id "$device_id")
  if [ "$rank" -eq 0 ] || [ -z "$log_dir" ]; then
    "${command[@]}" > >(tee ${log_dir:+"$log_dir/rank$rank.log"}) 2>&1 &
  else
    "${command[@]}" > "$log_dir/rank$rank.log" 2>&1 &
  fi
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
[ "$status" -eq 0 ] || echo "train_distributed.sh: a rank failed (exit $status)${log_dir:+; logs in $log_dir}" >&2
exit "$status"
