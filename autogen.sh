#!/bin/sh
# Regenerate the Autotools build system (configure, Makefile.in).
set -e
cd "$(dirname "$0")"
autoreconf --install --force >/dev/null
