# Shared helpers for the shell tools.  Sourced, not executed.

BUILD_DIR=${BUILD_DIR:-$top/build}
_stage_start=$(date +%s)

# Print which stage a long step is in, with the time elapsed since the
# script started, so a silent build is never mistaken for a hang.
stage ()
{
  printf '[%s +%4ss] %s\n' "$(basename "$0")" "$(( $(date +%s) - _stage_start ))" "$*" >&2
}

die ()
{
  printf '%s: error: %s\n' "$(basename "$0")" "$*" >&2
  exit 1
}
