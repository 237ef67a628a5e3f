# Sourced by the scripts under scripts/ and bench/ (before they change directory), never run.
# A script's usage is its header comment (the lines under the shebang), so that `--help` shows
# what a reader of the file sees and cannot drift from it as the header grows.

# The script that sourced this file, resolved now: the script may change directory later.
usage_script=$(readlink -f -- "$0")

# header_of FILE: FILE's header comment without the leading '# '.
header_of() {
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$1"
}

# usage_of: the sourcing script's usage.
usage_of() {
  header_of "$usage_script"
}

# answer_help ARG...: when the first ARG is -h or --help, prints the usage and exits 0.
answer_help() {
  case "${1:-}" in
    -h | --help) usage_of; exit 0 ;;
  esac
}

# takes_no_arguments NAME ARG...: answers --help, and refuses any other argument in one line,
# before the script does anything (a mistyped option must not start a long run).
takes_no_arguments() {
  local name=$1
  shift
  answer_help "$@"
  if [[ $# -gt 0 ]]; then
    echo "$name: unknown argument '$1' (it takes none; see --help)" >&2
    exit 2
  fi
}
