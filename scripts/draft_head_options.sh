# The --draft-head options of the translation recipes (examples/libreoffice_en_de/run.sh and
# scripts/translation_recipe.sh), kept in one place so that the recipes accept the same ones. Sourced
# with the recipe's defaults for scripts/draft_head_recipe.sh as its arguments, it sets draft_head=0 and
# head_options (those defaults; options given later override them) and defines
#   take_draft_head_option ARGS...   records a leading --draft-head, --head-* or --compare-block-size
#                                    option of ARGS and sets head_words to the words it took (0: none)
#   run_draft_head_recipe DATA_DIR SAVE_DIR SRC TGT
#                                    with --draft-head given, scripts/draft_head_recipe.sh on the recipe's
#                                    Transformer in SAVE_DIR (references DATA_DIR/raw/test.TGT), with the
#                                    recipe's preset, nproc, bench and bench_options (scripts/recipe_options.sh)
draft_head=0 head_options=("$@") head_words=0

take_draft_head_option() {
  case "$1" in
    --draft-head) draft_head=1; head_words=1 ;;
    --head-minutes | --head-block-size | --head-layers | --head-input-layers | --head-draft-vocab \
      | --head-distill-beam | --head-algorithms | --compare-block-size)
      [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
      head_options+=("$1" "$2"); head_words=2 ;;
    --head-compare) head_options+=("$1"); head_words=1 ;;
    *) head_words=0 ;;
  esac
}

run_draft_head_recipe() {
  local data=$1 save=$2 src=$3 tgt=$4 no_bench=()
  [ "$draft_head" -eq 1 ] || return 0
  [ "$bench" -eq 1 ] || no_bench=(--no-bench)
  bash "$(dirname "${BASH_SOURCE[0]}")/draft_head_recipe.sh" "$data/bin" "$save" -s "$src" -t "$tgt" \
    --references "$data/raw/test.$tgt" "${head_options[@]}" --preset "$preset" --nproc "$nproc" "${no_bench[@]}" \
    -- "${bench_options[@]}"
}
