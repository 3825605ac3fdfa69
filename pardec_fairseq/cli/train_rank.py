"""``fairseq-train`` for one rank started by ``scripts/train_distributed.sh``.

fairseq 0.12 leaves the process group alive when training ends; at interpreter exit gloo's threads
can then abort a rank that trained successfully ("terminate called without an active exception",
exit 134). Destroying the group before exit shuts them down in order.
"""
import torch.distributed as dist
from fairseq_cli.train import cli_main


def main():
    try:
        cli_main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
