# Options shared by the examples' run.sh scripts; sourced, it sets preset, name, bench,
# train_options (for train_transformer.sh) and bench_options (for bench.py). A recipe may set
# default_algorithms (the plugin algorithms benchmarked without --algorithms) and default_preset
# (the Transformer's preset without --preset; cpu unless set) before sourcing it.
preset=${default_preset:-cpu} name="" minutes=60 max_tokens=4096 nproc=1 bench=1 batch_size=1 warmup=() dropout=()
# outputs at most 1.2 x source + 10 tokens, as in fairseq's translation examples
bench_options=(--repetitions 2 --max-len-a 1.2 --max-len-b 10)
read -ra algorithms <<< "${default_algorithms:-greedy}"
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --nproc) nproc=$2; shift 2 ;;
    --warmup-updates) warmup=(--warmup-updates "$2"); shift 2 ;;
    --dropout) dropout=(--dropout "$2"); shift 2 ;;
    --name) name=$2; shift 2 ;;
    --bench-sentences) bench_options+=(--max-sentences "$2"); shift 2 ;;
    --batch-size) batch_size=$2; shift 2 ;;
    --repetitions) bench_options+=(--repetitions "$2"); shift 2 ;;
    --algorithms) read -ra algorithms <<< "$2"; shift 2 ;;
    --ctranslate2) bench_options+=(--ctranslate2); shift ;;
    --threads) read -ra threads <<< "$2"; bench_options+=(--threads "${threads[@]}"); shift 2 ;;
    --no-bench) bench=0; shift ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
train_options=(--preset "$preset" --minutes "$minutes" --max-tokens "$max_tokens" --nproc "$nproc"
  "${warmup[@]}" "${dropout[@]}")
bench_options+=(--algorithms "${algorithms[@]}" --batch-size "$batch_size" --name "bench_b$batch_size")
