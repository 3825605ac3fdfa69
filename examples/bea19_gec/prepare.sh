#!/usr/bin/env bash
# English grammatical error correction in the restricted setting of the BEA-2019 shared task, as Ge
# et al. 2022 (IAD) use it: train = W&I+LOCNESS v2.1 train, plus FCE v2.1 train, and Lang-8 and NUCLE
# 3.3 when their archives are put in the archives' folder (both need a request form, so they are never
# downloaded); valid = W&I+LOCNESS dev; test = CoNLL-2014 (1,312 sentences, two annotators, scored
# with examples/bea19_gec/m2scorer.py against its M2 file, copied to DATA_DIR/raw/test.m2). M2 ->
# parallel text with annotator 0's edits (m2_to_parallel.py); the text is tokenized as the M2 files
# are and is not tokenized again; joint BPE (32,000 merges, as Ge et al.), binarized with a joined
# dictionary. Idempotent: a finished run is reused.
#   examples/bea19_gec/prepare.sh [--raw-dir DIR] [--bpe-merges N] [DATA_DIR]   (default: data/bea19_gec)
# Without --raw-dir the archives are downloaded (cl.cam.ac.uk, comp.nus.edu.sg) into DATA_DIR/orig/;
# --raw-dir DIR takes them from DIR, as distributed, and downloads nothing. Lang-8 and NUCLE go into
# that folder too: lang8.bea19.tar.gz and release3.3.tar.bz2, or their M2 files
# lang8.train.auto.bea19.m2 and nucle.train.gold.bea19.m2 unpacked.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/prepare_archives.sh"
prepare_options bea19_gec 32000 "$@"
bash "$root/scripts/setup_venv.sh"

report() {
  for split in train valid test; do
    echo "bea19_gec $split: $(wc -l < "$data/raw/$split.src") sentence pairs"
  done
  echo "binarized data: $data/bin ($merges BPE merges; test references: $data/raw/test.tgt*, M2: $data/raw/test.m2)"
}
if already_prepared; then report; exit 0; fi

fetch_archives "$0" "$archives" "$download" \
  "wi+locness_v2.1.bea19.tar.gz https://www.cl.cam.ac.uk/research/nl/bea2019st/data/wi+locness_v2.1.bea19.tar.gz" \
  "?fce_v2.1.bea19.tar.gz https://www.cl.cam.ac.uk/research/nl/bea2019st/data/fce_v2.1.bea19.tar.gz" \
  "conll14st-test-data.tar.gz https://www.comp.nus.edu.sg/~nlp/conll14st/conll14st-test-data.tar.gz"
rm -f "$data"/raw/test.tgt*
"$root/.venv/bin/python" "$root/examples/bea19_gec/m2_to_parallel.py" --archives "$archives" \
  --out-dir "$data/raw" --work-dir "$data/extracted"
bash "$root/scripts/binarize.sh" --tokenized "$data/raw" "$data" src tgt "$merges"
mark_prepared
report
