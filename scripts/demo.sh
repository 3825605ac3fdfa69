#!/usr/bin/env bash
# What the plugin is for, in one command from a fresh clone (about 15 minutes on a 2-core CPU): create
# .venv/, prepare UA-GEC (Ukrainian grammatical error correction), train a small Transformer for 8
# minutes, then decode 160 test sentences with fairseq's greedy search, the plugin's greedy search and
# input-guided aggressive decoding (the same output as fairseq's greedy search, several times sooner),
# and CTranslate2, in one process. Small batches and a short warm-up so that 8 minutes make a model
# that corrects by copying; the recipe (examples/ua_gec/run.sh) trains for an hour.
#   bash scripts/demo.sh          CPU torch (the benchmark runs on one thread, where fairseq and
#                                 CTranslate2 are fastest on two cores; the plugin is faster on two)
#   bash scripts/demo.sh --cuda   install the CUDA build of torch instead (decoding then uses the GPU)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
start=$(date +%s)
bash "$root/scripts/setup_venv.sh" "$@"
threads=(); [ "${1:-}" = "--cuda" ] || threads=(--threads 1)
bash "$root/examples/ua_gec/run.sh" --name demo --minutes 8 --max-tokens 1536 --warmup-updates 100 \
  --bench-sentences 160 --batch-size 1 --repetitions 1 "${threads[@]}" --algorithms "greedy iad" --ctranslate2
echo "demo: finished in $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
