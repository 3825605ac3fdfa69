#!/usr/bin/env bash
# WMT14 English -> German as fairseq's examples/translation/prepare-wmt14en2de.sh --icml17 prepares it
# (the data of Vaswani et al. 2017, Stern et al. 2018, Xia et al. 2022): train = Europarl v7 + Common
# Crawl + News Commentary v9 (de-en), about 4.5M pairs, punctuation-normalized and cleaned (length
# ratio 1.5, 1 to 250 words); valid = newstest2013 (3,000); test = newstest2014, the test-full .sgm
# files (3,003). Moses tokenization with aggressive dash splits (as fairseq's), joint BPE (40,000
# merges), binarized with a joined dictionary. Idempotent: a finished run is reused.
#   examples/wmt14_en_de/prepare.sh [--raw-dir DIR] [--bpe-merges N] [DATA_DIR]   (default: data/wmt14_en_de)
# Without --raw-dir the five archives (about 1.6 GB) are downloaded from statmt.org into DATA_DIR/orig/;
# --raw-dir DIR takes them from DIR, as distributed, and downloads nothing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/prepare_archives.sh"
prepare_options wmt14_en_de 40000 "$@"
bash "$root/scripts/setup_venv.sh"

report() {
  for split in train valid test; do
    echo "wmt14_en_de $split: $(wc -l < "$data/raw/$split.en") sentence pairs"
  done
  echo "binarized data: $data/bin ($merges BPE merges)"
}
if already_prepared; then report; exit 0; fi

fetch_archives "$0" "$archives" "$download" \
  "training-parallel-europarl-v7.tgz https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz" \
  "training-parallel-commoncrawl.tgz https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz" \
  "training-parallel-nc-v9.tgz https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz" \
  "dev.tgz https://www.statmt.org/wmt14/dev.tgz" \
  "test-full.tgz https://www.statmt.org/wmt14/test-full.tgz"
"$root/.venv/bin/python" "$root/scripts/recipe_data.py" --archives "$archives" --out-dir "$data/raw" \
  --work-dir "$data/extracted" -s en -t de \
  --train training-parallel-europarl-v7.tgz training/europarl-v7.de-en \
  --train training-parallel-commoncrawl.tgz commoncrawl.de-en \
  --train training-parallel-nc-v9.tgz training/news-commentary-v9.de-en \
  --valid dev.tgz dev/newstest2013-src.en.sgm dev/newstest2013-ref.de.sgm \
  --test test-full.tgz test-full/newstest2014-deen-src.en.sgm test-full/newstest2014-deen-ref.de.sgm
bash "$root/scripts/binarize.sh" --aggressive-dash-splits "$data/raw" "$data" en de "$merges"
mark_prepared
report
