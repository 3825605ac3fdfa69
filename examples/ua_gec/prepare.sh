#!/usr/bin/env bash
# Ukrainian grammatical error correction from the PyPI package ua-gec 2.1.3 (CC-BY-4.0): sentence
# pairs of the gec-only layer, official train/test split (two references for test), joint BPE,
# binarized for fairseq.  Idempotent: a finished run is reused.
#   examples/ua_gec/prepare.sh [DATA_DIR]     (default: data/ua_gec)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
data=$(mkdir -p "${1:-$root/data/ua_gec}" && cd "${1:-$root/data/ua_gec}" && pwd)
bash "$root/scripts/setup_venv.sh"
python="$root/.venv/bin/python"

report() {
  for split in train valid test; do
    echo "ua_gec $split: $(wc -l < "$data/raw/$split.src") sentence pairs"
  done
  echo "binarized data: $data/bin (second test reference: $data/raw/test.tgt2)"
}
if [ -f "$data/.prepared" ]; then report; exit 0; fi

if ! "$python" -c "import ua_gec" 2>/dev/null; then
  "$python" -m pip install -q ua-gec==2.1.3 2> >(grep -v "^WARNING: Location" >&2) || {
    echo "prepare.sh: 'pip install ua-gec==2.1.3' failed." >&2
    echo "Manual step: download the ua-gec 2.1.3 wheel from PyPI on a connected machine and run" >&2
    echo "  $python -m pip install ./ua_gec-2.1.3-py3-none-any.whl ; then re-run this script." >&2
    exit 1
  }
fi
"$python" "$root/examples/ua_gec/extract_pairs.py" --out-dir "$data/raw"
bash "$root/scripts/binarize.sh" "$data/raw" "$data" src tgt 8000 uk
touch "$data/.prepared"
report
