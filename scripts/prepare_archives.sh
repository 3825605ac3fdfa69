# Sourced by the examples' prepare.sh scripts that start from official archives (wmt14_en_de,
# wmt16_en_ro, bea19_gec): their options, the archives, and the .prepared marker.
#
#   prepare_options NAME DEFAULT_MERGES "$@"
# parses the script's [--raw-dir DIR] [--bpe-merges N] [DATA_DIR] and sets data (DATA_DIR, default
# data/NAME, created, absolute), merges, archives (the folder of the archives: DIR, or DATA_DIR/orig
# where they are downloaded) and download (1 without --raw-dir, 0 with it: nothing is downloaded).
#
#   fetch_archives SCRIPT DIR DOWNLOAD ENTRY...
# makes sure DIR holds the file of each ENTRY, "NAME URL" (required) or "?NAME URL" (optional: used
# when present). With DOWNLOAD=1 a missing file is downloaded from its URL with curl. A required file
# still missing then stops SCRIPT with one message naming every such file, where it comes from and how
# to hand it over.
#
#   already_prepared / mark_prepared
# whether DATA_DIR holds a finished run (DATA_DIR/.prepared) with these BPE merges (a run with other
# merges stops the script with a message); mark the run finished.

prepare_options() {
  local name=$1 root
  merges=$2 data="" archives="" download=1
  shift 2
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  while [ $# -gt 0 ]; do
    case "$1" in
      --raw-dir) [ $# -ge 2 ] || { echo "prepare.sh: --raw-dir needs a folder" >&2; exit 2; }
        [ -d "$2" ] || { echo "prepare.sh: --raw-dir $2: no such folder" >&2; exit 2; }
        archives=$(cd "$2" && pwd) download=0; shift 2 ;;
      --bpe-merges) [ $# -ge 2 ] || { echo "prepare.sh: --bpe-merges needs a number" >&2; exit 2; }
        merges=$2; shift 2 ;;
      -*) echo "prepare.sh: unknown option $1 (options: --raw-dir DIR, --bpe-merges N)" >&2; exit 2 ;;
      *) [ -z "$data" ] || { echo "prepare.sh: one DATA_DIR only ($data, $1)" >&2; exit 2; }
        data=$1; shift ;;
    esac
  done
  [[ "$merges" =~ ^[1-9][0-9]*$ ]] || { echo "prepare.sh: --bpe-merges takes a positive number, not '$merges'" >&2; exit 2; }
  data=${data:-$root/data/$name}
  data=$(mkdir -p "$data" && cd "$data" && pwd)
  [ -n "$archives" ] || archives="$data/orig"
}

fetch_archives() {
  local script=$1 dir=$2 download=$3 entry name url optional missing=()
  shift 3
  mkdir -p "$dir"
  for entry in "$@"; do
    name=${entry%% *} url=${entry#* } optional=0
    if [ "${name:0:1}" = "?" ]; then optional=1 name=${name:1}; fi
    [ ! -s "$dir/$name" ] || continue
    if [ "$download" -eq 1 ]; then
      echo "prepare.sh: downloading $url"
      if curl -fL --connect-timeout 10 --progress-bar -o "$dir/$name.part" "$url"; then
        mv "$dir/$name.part" "$dir/$name"
        continue
      fi
      rm -f "$dir/$name.part"
    fi
    if [ "$optional" -eq 1 ]; then
      [ "$download" -eq 0 ] || echo "prepare.sh: could not download the optional $name ($url); going on without it" >&2
      continue
    fi
    missing+=("$name   (from $url)")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  if [ "$download" -eq 1 ]; then
    echo "prepare.sh: could not download these files (no network?); they are missing from $dir:" >&2
  else
    echo "prepare.sh: these files are missing from the --raw-dir folder $dir:" >&2
  fi
  printf '  %s\n' "${missing[@]}" >&2
  echo "Manual step: download them on a connected machine and put them, as distributed (archives not" >&2
  echo "unpacked, names unchanged), into one folder, then run: $script --raw-dir THAT_FOLDER" >&2
  echo "(the recipe's run.sh passes --raw-dir on to it)" >&2
  exit 1
}

already_prepared() {
  [ -f "$data/.prepared" ] || return 1
  local done_merges
  done_merges=$(sed -n 's/^bpe_merges=//p' "$data/.prepared")
  [ "$done_merges" = "$merges" ] && return 0
  echo "prepare.sh: $data was prepared with ${done_merges:-other} BPE merges, not $merges;" >&2
  echo "delete $data/.prepared to prepare it again, or give another DATA_DIR" >&2
  exit 1
}

mark_prepared() {
  echo "bpe_merges=$merges" > "$data/.prepared"
}
