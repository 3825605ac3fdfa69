"""Stop 91 probe of a reverted ChainLength (its passes timed in a deque of (length, seconds)): log ChainLength's best length, step cost and the window's per-length medians every 50 sentences."""
import numpy as np
from pardec_fairseq.decoding.drafters import chain_length
original = chain_length.ChainLength.next_chain
def logged(self):
    if self.chains % 50 == 0:
        medians = {}
        if self.times:
            steps, seconds = np.array(self.times).T
            medians = {int(n): ((steps == n).sum(), round(float(np.median(seconds[steps == n])) * 1e3, 3)) for n in np.unique(steps)}
        with open("/tmp/chainlog.txt", "a") as log:
            log.write(f"chains {self.chains} best {self.steps()} cost {self.step_cost():.3f} {medians}\n")
    return original(self)
chain_length.ChainLength.next_chain = logged
from pardec_fairseq.cli.bench import main
main()
