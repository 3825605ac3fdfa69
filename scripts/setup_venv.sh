#!/usr/bin/env bash
# Create .venv/ at the project root, or reuse it, with the verified fairseq 0.12 stack on Python 3.11
# (see README "Install"). Re-running is cheap: pip runs again only when this file or setup.py changed.
#   bash scripts/setup_venv.sh          CPU torch (default)
#   bash scripts/setup_venv.sh --cuda   the CUDA torch build of the same version
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
torch_spec="torch==2.13.0+cpu"  # the +cpu pin fails loudly instead of pulling several GB of CUDA
for arg in "$@"; do
  case "$arg" in
    --cuda) torch_spec="torch==2.13.0" ;;
    *) echo "setup_venv.sh: unknown option $arg (only --cuda)" >&2; exit 2 ;;
  esac
done

python=${PYTHON:-python3}
stamp="$venv/.pardec-setup"
wanted="$(cat "$root/scripts/setup_venv.sh" "$root/setup.py" | sha256sum | cut -c1-16) $torch_spec"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ]; then
  exit 0
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "setup_venv.sh: needs Python 3.11 (ve-fairseq ships cp311 wheels); set PYTHON=python3.11" >&2
  exit 1
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# this machine's pip.conf names local indexes that may be absent: drop pip's warnings about them
pip() { "$venv/bin/python" -m pip install --disable-pip-version-check -q "$@" 2> >(grep -v "^WARNING: Location" >&2); }
echo "setup_venv.sh: installing into $venv ($torch_spec)"
if [ "$torch_spec" = "torch==2.13.0" ] && "$venv/bin/python" -c 'import torch, sys; sys.exit("+cpu" not in torch.__version__)' 2>/dev/null; then
  "$venv/bin/python" -m pip uninstall -q -y torch  # torch==2.13.0 would count the CPU build as installed
fi
pip "$torch_spec" numpy==2.4.6 hydra-core==1.3.8 omegaconf==2.3.1 sacrebleu==2.6.0 bitarray regex tqdm \
  scikit-learn cython cffi packaging subword-nmt==0.3.8 sacremoses==0.2.0 matplotlib==3.11.2 \
  gleu==1.1.0 pytest==9.2.0 pytest-xdist==3.8.0 hypothesis==6.170.15 ctranslate2==4.8.5 pydivsufsort==0.0.20 \
  numba==0.68.1
# fairseq 0.12.3 built for Python 3.11; its declared dependencies would replace torch, so none
pip --no-deps ve-fairseq==0.12.3
pip --no-deps -e "$root"
"$venv/bin/python" -c "import fairseq, torch, pardec_fairseq" 2> "$venv/import-check.log" || {
  cat "$venv/import-check.log" >&2; echo "setup_venv.sh: the environment does not import" >&2; exit 1; }
echo "$wanted" > "$stamp"
