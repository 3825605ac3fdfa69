#!/usr/bin/env bash
# WMT16 English -> Romanian as Xia et al. 2022 (GAD) and the non-autoregressive work before them use
# it: train = Europarl v8 + SETIMES2 (en-ro), about 610k pairs, punctuation-normalized and cleaned
# (length ratio 1.5, 1 to 250 words); valid = newsdev2016 (1,999); test = newstest2016 (1,999), from
# their .sgm files. Moses tokenization with aggressive dash splits, joint BPE (40,000 merges),
# binarized with a joined dictionary. Idempotent: a finished run is reused.
#   examples/wmt16_en_ro/prepare.sh [--raw-dir DIR] [--bpe-merges N] [DATA_DIR]   (default: data/wmt16_en_ro)
# Without --raw-dir the four archives are downloaded (statmt.org; SETIMES2 from OPUS) into
# DATA_DIR/orig/; --raw-dir DIR takes them from DIR, as distributed, and downloads nothing. The dev
# archive is dev-romanian-updated.tgz (WMT16's corrected Romanian dev set); WMT16's dev.tgz is taken
# instead when only it is there.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/prepare_archives.sh"
prepare_options wmt16_en_ro 40000 "$@"
bash "$root/scripts/setup_venv.sh"

report() {
  for split in train valid test; do
    echo "wmt16_en_ro $split: $(wc -l < "$data/raw/$split.en") sentence pairs"
  done
  echo "binarized data: $data/bin ($merges BPE merges)"
}
if already_prepared; then report; exit 0; fi

dev=dev-romanian-updated.tgz
[ -s "$archives/$dev" ] || [ ! -s "$archives/dev.tgz" ] || dev=dev.tgz
fetch_archives "$0" "$archives" "$download" \
  "training-parallel-ep-v8.tgz https://data.statmt.org/wmt16/translation-task/training-parallel-ep-v8.tgz" \
  "en-ro.txt.zip https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-ro.txt.zip" \
  "$dev https://data.statmt.org/wmt16/translation-task/$dev" \
  "test.tgz https://data.statmt.org/wmt16/translation-task/test.tgz"
"$root/.venv/bin/python" "$root/scripts/recipe_data.py" --archives "$archives" --out-dir "$data/raw" \
  --work-dir "$data/extracted" -s en -t ro \
  --train training-parallel-ep-v8.tgz training-parallel-ep-v8/europarl-v8.ro-en \
  --train en-ro.txt.zip SETIMES.en-ro \
  --valid "$dev" dev/newsdev2016-enro-src.en.sgm dev/newsdev2016-enro-ref.ro.sgm \
  --test test.tgz test/newstest2016-enro-src.en.sgm test/newstest2016-enro-ref.ro.sgm
bash "$root/scripts/binarize.sh" --aggressive-dash-splits "$data/raw" "$data" en ro "$merges"
mark_prepared
report
