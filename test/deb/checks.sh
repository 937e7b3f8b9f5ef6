# SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
# shellcheck shell=sh
# What the guest-side checks share.  test/deb/install.test copies this file to
# /opt/check-deb/checks.sh in the Debian root, where seq-session-checks and
# promotion-checks source it inside a bus started by
# "dbus-run-session --config-file=/opt/check-deb/seq-session.conf".
#
# res STATUS TEXT prints the check's line: "PASS TEXT" when STATUS is 0,
# otherwise "FAIL TEXT" and /tmp/out indented; test/deb/install.test turns these
# lines into TAP.  $addr is the bus's address list, $seq and $stream its
# unixseq: and unix: entries.

res () { if [ "$1" -eq 0 ]; then echo "PASS $2"; else echo "FAIL $2"; sed 's/^/    /' /tmp/out; fi; }
addr=$DBUS_SESSION_BUS_ADDRESS
# shellcheck disable=SC2034 # used by the scripts that source this file
seq=$(echo "$addr" | tr ';' '\n' | grep '^unixseq:')
# shellcheck disable=SC2034 # used by the scripts that source this file
stream=$(echo "$addr" | tr ';' '\n' | grep '^unix:')
