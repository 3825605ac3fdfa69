#!/usr/bin/env bash
# Moses-tokenize, learn a joint BPE on the training split, apply it, and binarize for fairseq.
#   scripts/binarize.sh [--tokenized | --aggressive-dash-splits] RAW_DIR OUT_DIR SRC TGT MERGES [MOSES_LANG]
# RAW_DIR holds {train,valid,test}.{SRC,TGT}; OUT_DIR gets tok/, bpe/ (with bpe/codes) and bin/.
# MOSES_LANG is the tokenizer's language for both sides (default: each side's suffix).
# --tokenized               the text is already tokenized (e.g. M2 files): tok/ gets it unchanged
# --aggressive-dash-splits  Moses' -a: "well-known" -> "well @-@ known" (fairseq's WMT recipes)
set -euo pipefail
usage="usage: $0 [--tokenized | --aggressive-dash-splits] RAW_DIR OUT_DIR SRC TGT MERGES [MOSES_LANG]"
tokenized=0 tokenize_options=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tokenized) tokenized=1; shift ;;
    --aggressive-dash-splits) tokenize_options=(--aggressive-dash-splits); shift ;;
    --*) echo "binarize.sh: unknown option $1" >&2; echo "$usage" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -eq 5 ] || [ $# -eq 6 ] || { echo "$usage" >&2; exit 2; }
[ "$tokenized" -eq 0 ] || [ ${#tokenize_options[@]} -eq 0 ] || {
  echo "binarize.sh: --tokenized and --aggressive-dash-splits exclude each other" >&2; exit 2; }
raw=$1 out=$2 src=$3 tgt=$4 merges=$5 moses_lang=${6:-}
bin_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.venv/bin" && pwd)
mkdir -p "$out/tok" "$out/bpe"
log="$out/binarize.log"
: > "$log"
quiet() {  # run a tool with its progress bars sent to the log; on failure show the log's end
  "$@" 2>> "$log" || { echo "binarize.sh: $1 failed; the end of $log:" >&2; tail -5 "$log" >&2; exit 1; }
}

for split in train valid test; do
  for lang in $src $tgt; do
    file="$raw/$split.$lang"
    [ -s "$file" ] || { echo "binarize.sh: $file is missing or empty" >&2; exit 1; }
    # an empty line would become a sentence of only </s>: refuse it, naming where it is
    if empty=$(grep -n -m1 -v '[^[:space:]]' "$file"); then
      echo "binarize.sh: $file has an empty line (line ${empty%%:*}); remove or fill it" >&2; exit 1
    fi
    if [ "$tokenized" -eq 1 ]; then
      cp "$file" "$out/tok/$split.$lang"
    else
      quiet "$bin_dir/sacremoses" -l "${moses_lang:-$lang}" -j 2 tokenize "${tokenize_options[@]}" \
        < "$file" > "$out/tok/$split.$lang"
    fi
  done
done

quiet "$bin_dir/subword-nmt" learn-joint-bpe-and-vocab -s "$merges" -o "$out/bpe/codes" \
  --input "$out/tok/train.$src" "$out/tok/train.$tgt" \
  --write-vocabulary "$out/bpe/vocab.$src" "$out/bpe/vocab.$tgt"
for split in train valid test; do
  for lang in $src $tgt; do
    quiet "$bin_dir/subword-nmt" apply-bpe -c "$out/bpe/codes" --vocabulary "$out/bpe/vocab.$lang" \
      --vocabulary-threshold 1 < "$out/tok/$split.$lang" > "$out/bpe/$split.$lang"
  done
done

rm -rf "$out/bin"
quiet "$bin_dir/fairseq-preprocess" --source-lang "$src" --target-lang "$tgt" \
  --trainpref "$out/bpe/train" --validpref "$out/bpe/valid" --testpref "$out/bpe/test" \
  --destdir "$out/bin" --joined-dictionary --workers 2 >> "$log"
grep -E "sents, [0-9]+ tokens" "$log" | sed 's/.*preprocess[^[]*//'

