#!/usr/bin/env python3
"""Analyse the heads of a blockwise_transformer (same as the ``pardec-analyze-heads`` console command); see --help."""
from pardec_fairseq.cli.analyze_heads import main

if __name__ == "__main__":
    main()
