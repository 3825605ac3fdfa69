#!/usr/bin/env bash
# English -> English rewriting, King James Version -> World English Bible, from the SWORD modules of
# the Debian packages sword-text-kjv and sword-text-web (public domain texts) read with diatheke:
# verses aligned by reference, whole books held out for valid/test, joint BPE, binarized for fairseq.
# Idempotent: a finished run is reused.
#   examples/kjv_web/prepare.sh [DATA_DIR]     (default: data/kjv_web)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
data=$(mkdir -p "${1:-$root/data/kjv_web}" && cd "${1:-$root/data/kjv_web}" && pwd)
bash "$root/scripts/setup_venv.sh"
packages=(diatheke sword-text-kjv sword-text-web)
modules=(engKJV2006eb engWEB2015eb)  # the SWORD names of the KJV and WEB modules of those packages

report() {
  for split in train valid test; do
    echo "kjv_web $split: $(wc -l < "$data/raw/$split.kjv") verse pairs"
  done
  echo "binarized data: $data/bin"
}
if [ -f "$data/.prepared" ]; then report; exit 0; fi

have_modules() {
  command -v diatheke >/dev/null || return 1
  local list
  list=$(diatheke -b system -k modulelist 2>/dev/null) || return 1
  for module in "${modules[@]}"; do grep -q "^$module " <<< "$list" || return 1; done
}
if ! have_modules; then
  echo "kjv_web: installing ${packages[*]} (log: $data/apt.log)"
  { apt-get install -y "${packages[@]}" || { apt-get update && apt-get install -y "${packages[@]}"; }; } \
    > "$data/apt.log" 2>&1 || true
  have_modules || {
    echo "prepare.sh: diatheke or the modules ${modules[*]} are still missing after" >&2
    echo "'apt-get install -y ${packages[*]}' (see $data/apt.log)." >&2
    echo "Manual step: as root, run 'apt-get update && apt-get install -y ${packages[*]}'" >&2
    echo "(Debian/Ubuntu), so that 'diatheke -b system -k modulelist' lists both modules; then re-run." >&2
    exit 1
  }
fi

"$root/.venv/bin/python" "$root/examples/kjv_web/extract_pairs.py" --out-dir "$data/raw" \
  --kjv-module "${modules[0]}" --web-module "${modules[1]}"
bash "$root/scripts/binarize.sh" "$data/raw" "$data" kjv web 8000 en
touch "$data/.prepared"
report
