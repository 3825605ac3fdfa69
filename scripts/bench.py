#!/usr/bin/env python3
"""Run the benchmark (same as the ``pardec-bench`` console command); see --help."""
from pardec_fairseq.cli.bench import main

if __name__ == "__main__":
    main()
