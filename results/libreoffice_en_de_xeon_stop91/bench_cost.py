"""Probe: the benchmark with ChainLength's step cost set to the value measured on this machine."""
import sys
from pardec_fairseq.decoding.drafters import chain_length
chain_length.STEP_COST = float(sys.argv.pop(1))
from pardec_fairseq.cli.bench import main
main()
