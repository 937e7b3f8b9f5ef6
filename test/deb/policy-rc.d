#!/bin/sh
# SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
# check-deb: maintainer scripts never start or stop daemons here
exit 101
