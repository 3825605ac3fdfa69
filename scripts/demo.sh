#!/usr/bin/env bash
# What the plugin is for, in one command from a fresh clone (12-13 minutes on a 2-core CPU): create
# .venv/, prepare UA-GEC (Ukrainian grammatical error correction), train a small Transformer for 5
# minutes, then decode 160 test sentences with fairseq's greedy and beam search, the plugin's greedy
# search and input-guided aggressive decoding (the same output as fairseq's greedy search, several
# times sooner), and CTranslate2, in one process. Small batches, a short warm-up and no dropout, so
# that 5 minutes make a model that corrects by copying; the recipe (examples/ua_gec/run.sh) trains
# for an hour.
#   bash scripts/demo.sh                CPU torch (the benchmark runs on one thread, where fairseq and
#                                       CTranslate2 are fastest on two cores; the plugin is faster on two)
#   bash scripts/demo.sh --cuda         install the CUDA build of torch instead (decoding then uses the GPU)
#   bash scripts/demo.sh --translation  then translation too (about 15 minutes more): LibreOffice help
#                                       En->De, a model trained 10 minutes, decoded by fairseq, the
#                                       plugin's greedy search and the drafters that need no training
#                                       (self-draft on a CPU, lookahead, retrieval), and CTranslate2
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
start=$(date +%s)
setup=() threads=(--threads 1) translation=0
no_training_drafters="self-draft lookahead retrieval"  # self-draft drafts on the CPU's vector kernel
for arg in "$@"; do
  case "$arg" in
    --cuda) setup=(--cuda) threads=() no_training_drafters="lookahead retrieval" ;;
    --translation) translation=1 ;;
    *) echo "demo.sh: unknown option $arg (--cuda, --translation)" >&2; exit 2 ;;
  esac
done
elapsed() { echo "$(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"; }
short_training=(--max-tokens 512 --dropout 0 --warmup-updates 100)
bench=(--batch-size 1 --repetitions 1 "${threads[@]}" --ctranslate2)

bash "$root/scripts/setup_venv.sh" "${setup[@]}"
bash "$root/examples/ua_gec/run.sh" --name demo --minutes 5 "${short_training[@]}" \
  --bench-sentences 160 "${bench[@]}" --algorithms "greedy iad"
echo "demo: grammatical error correction finished in $(elapsed)"
[ "$translation" -eq 1 ] || exit 0
bash "$root/examples/libreoffice_en_de/run.sh" --name demo --minutes 10 "${short_training[@]}" \
  --bench-sentences 100 "${bench[@]}" --algorithms "greedy $no_training_drafters"
echo "demo: translation finished too, in $(elapsed) in all"
