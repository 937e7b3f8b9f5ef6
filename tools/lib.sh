# SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
# Shared helpers for the shell tools.  Sourced, not executed.

BUILD_DIR=${BUILD_DIR:-$top/build}
# Each script drives a build or a test run of its own (the kernel's, the
# dbus fork's make and make check): the top-level make's flags and
# variables (its -k, the test harness's TEST_LOGS=...) must not leak into
# them.
unset MAKEFLAGS MFLAGS MAKELEVEL
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

# dbus_fork_files: the project's own files of the dbus fork (libdbus and
# dbus-daemon modules and their tests), one per line.  Each path is the same
# in this repository and in the dbus tree: tools/build/dbus links them in,
# tools/build/deb packages them; nothing else of the project enters dbus.
dbus_fork_files ()
{
  (cd "$top" && ls dbus/*.[ch] bus/*.[ch] test/*.c test/internals/*.[ch] 2>/dev/null | LC_ALL=C sort)
}

# The upstream trees (kernel, dbus) are unpacked once into a git repository
# whose pristine state is the commit tagged "base"; our patch series is
# checked out over it as one commit.

# git_in DIR ARGS...: git in such a tree, with a fixed identity and no
# automatic gc (tens of thousands of loose objects would start one on
# every commit).
git_in ()
{
  local dir=$1
  shift
  git -C "$dir" -c user.name=dbus-mcast -c user.email=build@dbus-mcast.invalid \
      -c core.autocrlf=false -c gc.auto=0 "$@"
}

# unpack_tree DIR TARBALL MESSAGE: unless DIR already has its "base" tag,
# unpack TARBALL (top directory stripped) into DIR and commit it as "base".
# The tag is looked up with rev-parse: a packed tag has no file of its own.
unpack_tree ()
{
  local dir=$1 tarball=$2 message=$3

  git_in "$dir" rev-parse -q --verify refs/tags/base >/dev/null 2>&1 && return 0
  stage "unpacking $(basename "$tarball") into $dir (once)"
  rm -rf "$dir" "$dir.tmp"
  mkdir -p "$dir.tmp"
  tar -C "$dir.tmp" --strip-components=1 -xJf "$tarball"
  mv "$dir.tmp" "$dir"
  stage "recording the pristine tree in git (once)"
  git_in "$dir" init -q
  git_in "$dir" config gc.auto 0
  git_in "$dir" add -A -f >/dev/null
  git_in "$dir" commit -q -m "$message"
  git_in "$dir" tag base
}

# kernel_series DIR: the patches of the kernel series under DIR, in the
# order they apply: each series is a directory (1-dgram/, 2-seqpacket/) as
# git format-patch --cover-letter writes it, and its cover letter carries
# no diff.
kernel_series ()
{
  ls "$1"/*/[0-9][0-9][0-9][0-9]-*.patch 2>/dev/null |
    grep -v '/0000-cover-letter\.patch$' || true
}

# apply_series DIR MESSAGE PATCH...: apply the patches to "base" in a
# scratch index and check the result out over the current tree as one
# commit, so files whose content did not change keep their mtime and
# rebuilds stay incremental.
apply_series ()
{
  local dir=$1 message=$2 index=$1.series-index p tree
  shift 2

  rm -f "$index"
  GIT_INDEX_FILE=$index git_in "$dir" read-tree base
  for p in "$@"; do
    GIT_INDEX_FILE=$index git_in "$dir" apply --cached --whitespace=nowarn "$p" \
      || die "patch does not apply: $p"
  done
  tree=$(GIT_INDEX_FILE=$index git_in "$dir" write-tree)
  rm -f "$index"
  if [ "$(git_in "$dir" rev-parse 'HEAD^{tree}')" != "$tree" ]; then
    git_in "$dir" checkout -q --detach \
      "$(git_in "$dir" commit-tree "$tree" -p base -m "$message")"
  fi
}

# TAP: scripts that collect several test programs into one stream number
# the results themselves.  emit ok|not-ok DESCRIPTION adds one result;
# tap_include FILE PREFIX renumbers the results of a program's TAP output
# into the stream, keeping its diagnostics as comments, and sets
# tap_included to the number of results it added.  The script ends with
# echo "1..$tap_n" and exits with $tap_failed.
tap_n=0
tap_failed=0

emit ()
{
  tap_n=$((tap_n + 1))
  if [ "$1" = ok ]; then
    echo "ok $tap_n $2"
  else
    echo "not ok $tap_n $2"
    tap_failed=1
  fi
}

tap_include ()
{
  local before=$tap_n line
  while IFS= read -r line; do
    case $line in
      "ok "[0-9]*) emit ok "$2 $(echo "$line" | sed 's/^ok [0-9]* *//')" ;;
      "not ok "[0-9]*) emit not-ok "$2 $(echo "$line" | sed 's/^not ok [0-9]* *//')" ;;
      "Bail out!"*) emit not-ok "$2 $line" ;;
      1..*) ;;
      "#"*) echo "$line" ;;
      *) echo "# $line" ;;
    esac
  done <"$1"
  tap_included=$((tap_n - before))
}
