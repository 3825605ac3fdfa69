#!/usr/bin/env bash
# The whole pipeline from a fresh clone in one command (13 minutes on a 2-core CPU):
# create .venv/, prepare the LibreOffice En-De data, train a small Transformer for 10 minutes, and
# benchmark the plugin's algorithms beside fairseq's greedy and beam search on 300 test sentences.
#   bash scripts/demo.sh          CPU torch
#   bash scripts/demo.sh --cuda   install the CUDA build of torch instead (decoding then uses the GPU)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
start=$(date +%s)
bash "$root/scripts/setup_venv.sh" "$@"
# small batches: about twice the updates of the default in the same 10 minutes
bash "$root/examples/libreoffice_en_de/run.sh" --preset cpu --name demo --minutes 10 --max-tokens 1536 \
  --bench-sentences 300 --batch-size 1 --repetitions 2 --algorithms "greedy"
echo "demo: finished in $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
