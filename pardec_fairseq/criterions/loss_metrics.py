"""The loss lines every slot criterion of the plugin logs, as fairseq's cross-entropy criterions do."""
import math

from fairseq import metrics


def log_loss_in_bits(loss: float, nll_loss: float, size: int):
    """``loss`` and ``nll_loss`` (summed in nats over ``size`` scored targets) as bits per target, and the
    perplexity."""
    size = max(1, size)
    metrics.log_scalar("loss", loss / size / math.log(2), size, round=3)
    metrics.log_scalar("nll_loss", nll_loss / size / math.log(2), size, round=3)
    metrics.log_derived("ppl", lambda meters: 2 ** meters["nll_loss"].avg)
