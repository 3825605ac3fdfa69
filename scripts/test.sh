#!/usr/bin/env bash
# Create or reuse .venv/ and run the test suite, a pytest-xdist worker per core (most of its time is
# single-threaded: fairseq commands in subprocesses, small models). Extra arguments go to pytest
# (-n 0: no workers).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup_venv.sh"
cd "$root"
exec .venv/bin/python -m pytest tests -n auto --dist worksteal "$@"
