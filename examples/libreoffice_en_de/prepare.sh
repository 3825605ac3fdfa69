#!/usr/bin/env bash
# English -> German from the LibreOffice help pages (Debian packages libreoffice-help-en-us and
# libreoffice-help-de, MPL-2.0): aligned paragraphs, whole help pages held out for valid/test,
# joint BPE, binarized for fairseq.  Idempotent: a finished run is reused.
#   examples/libreoffice_en_de/prepare.sh [DATA_DIR]     (default: data/libreoffice_en_de)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
data=$(mkdir -p "${1:-$root/data/libreoffice_en_de}" && cd "${1:-$root/data/libreoffice_en_de}" && pwd)
bash "$root/scripts/setup_venv.sh"

report() {
  for split in train valid test; do
    echo "libreoffice_en_de $split: $(wc -l < "$data/raw/$split.en") sentence pairs"
  done
  echo "binarized data: $data/bin"
}
if [ -f "$data/.prepared" ]; then report; exit 0; fi

help_root=/usr/share/libreoffice/help
if [ ! -d "$help_root/en-US/text" ] || [ ! -d "$help_root/de/text" ]; then
  help_root="$data/packages/usr/share/libreoffice/help"
  if [ ! -d "$help_root/en-US/text" ] || [ ! -d "$help_root/de/text" ]; then
    mkdir -p "$data/debs"
    if ! ls "$data"/debs/libreoffice-help-en-us_*.deb "$data"/debs/libreoffice-help-de_*.deb >/dev/null 2>&1; then
      (cd "$data/debs" && apt-get download libreoffice-help-en-us libreoffice-help-de) || {
        echo "prepare.sh: 'apt-get download libreoffice-help-en-us libreoffice-help-de' failed." >&2
        echo "Manual step: put both .deb files (from any Debian/Ubuntu mirror) into $data/debs/," >&2
        echo "or install the packages so that /usr/share/libreoffice/help/{en-US,de} exist; then re-run." >&2
        exit 1
      }
    fi
    for deb in "$data"/debs/libreoffice-help-*.deb; do dpkg-deb -x "$deb" "$data/packages"; done
  fi
fi

"$root/.venv/bin/python" "$root/examples/libreoffice_en_de/extract_pairs.py" \
  --help-root "$help_root" --out-dir "$data/raw"
bash "$root/scripts/binarize.sh" "$data/raw" "$data" en de 8000
touch "$data/.prepared"
report
