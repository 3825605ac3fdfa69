#!/usr/bin/env python3
"""Draw Jacobi decoding iterates and dependency graphs (same as the ``pardec-ddgviz`` console command); see --help."""
from pardec_fairseq.cli.ddgviz import main

if __name__ == "__main__":
    main()
