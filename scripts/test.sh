#!/usr/bin/env bash
# Create or reuse .venv/ and run the test suite. Extra arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup_venv.sh"
cd "$root"
exec .venv/bin/python -m pytest tests "$@"
