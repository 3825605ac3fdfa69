#!/usr/bin/env bash
# Sequence-level knowledge distillation (Kim & Rush 2016): beam-search the training set with a
# teacher and binarize (source, teacher output) as the new training set. GAD's drafter and
# verifier and BPD's heads accept far more tokens when trained on such data.
#   scripts/distill.sh DATA_BIN TEACHER.pt OUT_BIN -s SRC -t TGT [--beam 5] [--batch-size 64]
#                      [--max-len-a 1.2 --max-len-b 10] [--valid] [--cpu]
# OUT_BIN gets the distilled train split, the dictionaries of DATA_BIN and its valid/test splits
# unchanged, so models trained on it share the teacher's vocabulary. With --beam 1 (self-distillation
# for a draft head) the plugin's greedy search decodes: fairseq's beam-1 output, sooner. --valid
# distills the valid split too, so that validation scores what a model fitting the teacher's outputs
# is for (a draft head's `accepted`: the tokens decoding would keep), not the references.
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,12p "$0" >&2; exit 2; }
data=$1 teacher=$2 out=$3; shift 3
src="" tgt="" beam=5 batch_size=64 max_len_a=1.2 max_len_b=10 splits=(train) extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -s|--source-lang) src=$2; shift 2 ;;
    -t|--target-lang) tgt=$2; shift 2 ;;
    --beam) beam=$2; shift 2 ;;
    --batch-size) batch_size=$2; shift 2 ;;
    --max-len-a) max_len_a=$2; shift 2 ;;
    --max-len-b) max_len_b=$2; shift 2 ;;
    --valid) splits=(train valid); shift ;;
    --cpu) extra+=(--cpu); shift ;;
    *) echo "distill.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$src" ] && [ -n "$tgt" ] || { echo "distill.sh: -s SRC and -t TGT are required" >&2; exit 2; }
[ -f "$teacher" ] || { echo "distill.sh: teacher checkpoint $teacher not found" >&2; exit 1; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv/bin"
mkdir -p "$out/text"

search=(--beam "$beam")
[ "$beam" != 1 ] || search=(--gen-algo greedy)
prefixes=()
for split in "${splits[@]}"; do
  # the plugin's task sees every sentence (fairseq 0.12 would drop the remainder batch)
  "$venv/fairseq-generate" "$data" --user-dir "$root/pardec_fairseq" --task translation_pardec \
    --gen-subset "$split" --path "$teacher" -s "$src" -t "$tgt" "${search[@]}" --batch-size "$batch_size" \
    --max-len-a "$max_len_a" --max-len-b "$max_len_b" "${extra[@]}" > "$out/text/$split.generate.log"
  "$venv/python" - "$out/text" "$split" "$src" "$tgt" <<'PY'
import re, sys
folder, split, src, tgt = sys.argv[1:]
sources, hypotheses = {}, {}
for line in open(f"{folder}/{split}.generate.log", encoding="utf-8"):
    if m := re.match(r"S-(\d+)\t(.*)$", line.rstrip("\n")):
        sources[int(m.group(1))] = m.group(2)
    elif m := re.match(r"H-(\d+)\t\S+\t(.*)$", line.rstrip("\n")):
        hypotheses[int(m.group(1))] = m.group(2)
ids = sorted(sources)
if ids != list(range(len(ids))) or sorted(hypotheses) != ids:
    sys.exit(f"distill.sh: expected {split} outputs for ids 0..{len(ids) - 1}, got {len(hypotheses)} hypotheses")
empty = [i for i in ids if not hypotheses[i].strip()]
with open(f"{folder}/{split}.{src}", "w", encoding="utf-8") as s, \
        open(f"{folder}/{split}.{tgt}", "w", encoding="utf-8") as t:
    for i in ids:
        # an empty teacher output would binarize to </s> alone: keep the pair, say how many
        s.write(sources[i] + "\n")
        t.write(hypotheses[i] + "\n")
print(f"distill.sh: {len(ids)} distilled {split} pairs ({len(empty)} with an empty teacher output)")
PY
  prefixes+=("--${split}pref" "$out/text/$split")
done
rm -rf "$out/bin.tmp"
"$venv/fairseq-preprocess" -s "$src" -t "$tgt" "${prefixes[@]}" --destdir "$out/bin.tmp" \
  --srcdict "$data/dict.$src.txt" --tgtdict "$data/dict.$tgt.txt" --workers 2 > "$out/text/preprocess.log" 2>&1 || {
  echo "distill.sh: fairseq-preprocess failed, see $out/text/preprocess.log" >&2; exit 1; }
cp "$out"/bin.tmp/* "$out/"
rm -rf "$out/bin.tmp"
for split in valid test; do
  [[ " ${splits[*]} " == *" $split "* ]] && continue
  for f in "$data/$split.$src-$tgt".*; do [ -e "$f" ] && cp "$f" "$out/"; done
done
echo "distilled data: $out"
