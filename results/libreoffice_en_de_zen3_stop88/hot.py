"""Stop 88 probe (not product code): one captured drafting call of the head repeated for 3 s, hot or (``cold``)
after writing 32 MB before each call. Run from the repository root:
.venv/bin/python results/libreoffice_en_de_zen3_stop88/hot.py [cold]"""
import sys, time, numpy as np, torch
sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
from headcall import GAD, setup
from pardec_fairseq.decoding.drafters import compiled_head

def captured_call():
    """The arguments of the head's compiled drafting call in the first pass of the fourth test sentence."""
    runs, models, batches = setup(20, [GAD])
    captured, draft = {}, compiled_head._remember_and_draft

    def capture(*args):
        captured.setdefault("args", args)
        return draft(*args)
    compiled_head._remember_and_draft = capture
    with torch.no_grad():
        runs[0].generator.generate(models, batches[3])
    compiled_head._remember_and_draft = draft
    return captured["args"]


def main(cold):
    args, draft = captured_call(), compiled_head._remember_and_draft
    flush = np.ones(32 << 18, dtype=np.float32)  # 32 MB
    n, t0, spent = 0, time.perf_counter(), 0.0
    while time.perf_counter() - t0 < 3:
        if cold:
            flush += 1.0
        b = time.perf_counter(); draft(*args); spent += time.perf_counter() - b; n += 1
    print(f"{'cold' if cold else 'hot'}: {n} calls, {spent / n * 1e6:.1f} us a call")


if __name__ == "__main__":
    main(len(sys.argv) > 1 and sys.argv[1] == "cold")
