# Sourced by the scripts under scripts/ and bench/, never run. A script's usage is its header
# comment (the lines under the shebang), so that `--help` shows what a reader of the file sees
# and cannot drift from it as the header grows.

# usage_of FILE: FILE's header comment without the leading '# '.
usage_of() {
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$1"
}

# answer_help FILE ARG...: when the first ARG is -h or --help, prints FILE's usage and exits 0.
answer_help() {
  local file=$1
  shift
  case "${1:-}" in
    -h | --help) usage_of "$file"; exit 0 ;;
  esac
}

# takes_no_arguments NAME FILE ARG...: answers --help, and refuses any other argument in one
# line, before the script does anything (a mistyped option must not start a long run).
takes_no_arguments() {
  local name=$1 file=$2
  shift 2
  answer_help "$file" "$@"
  if [[ $# -gt 0 ]]; then
    echo "$name: unknown argument '$1' (it takes none; see --help)" >&2
    exit 2
  fi
}
