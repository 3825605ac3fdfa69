#!/usr/bin/env bash
# On the lent GPU: train the one-slot draft head on the CPU-trained verifier, keep checkpoints along the way.
set -uo pipefail
MIN=${1:-7}
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
tar xzf .whl/site.tgz -C /tmp/ || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p .venv/bin
for t in train:fairseq-train generate:fairseq-generate preprocess:fairseq-preprocess; do
  printf '#!/bin/sh\nexec python3 -m fairseq_cli.%s "$@"\n' "${t%%:*}" > .venv/bin/${t##*:}
done
printf '#!/bin/sh\nexec python3 "$@"\n' > .venv/bin/python
chmod +x .venv/bin/*
nvidia-smi --query-gpu=name,memory.used --format=csv
python3 -c "import fairseq, torch, pardec_fairseq; print('imports ok', torch.__version__, torch.cuda.is_available())" || exit 1
echo "setup: $((SECONDS - t0)) s"
G=.device/in
H=/tmp/head_gpu
bash scripts/train_draft_head.sh $G/self_distilled $G/verifier.pt $H -s en -t de --minutes "$MIN" --block-size 1 \
  --layers 1 --input-layers 1 --draft-vocab 4096 --max-tokens 8192 -- --save-interval-updates 1500 --keep-interval-updates -1
echo "trained: $((SECONDS - t0)) s"
cp $H/train.log $OUT/head_gpu_train.log
ls -la $H
python3 - "$H" "$OUT" <<'PY'
import sys, glob, os, torch
h, out = sys.argv[1:]
for p in sorted(glob.glob(h + "/checkpoint_*.pt")):
    c = torch.load(p, map_location="cpu", weights_only=False)
    c.pop("last_optimizer_state", None)
    name = os.path.basename(p).replace("checkpoint_", "head_gpu_")
    torch.save(c, os.path.join(out, name))
    print(name, os.path.getsize(os.path.join(out, name)), "bytes")
PY
ls -la $OUT
echo "total: $((SECONDS - t0)) s"
