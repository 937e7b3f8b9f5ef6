#!/bin/sh
# SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
# Regenerate the Autotools build system (configure, Makefile.in).
set -e
cd "$(dirname "$0")"
autoreconf --install --force >/dev/null
