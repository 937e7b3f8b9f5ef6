/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-mcast-uapi.h  The kernel's multicast AF_UNIX interface, if built with it
 *
 * What this module is for: one place that includes the multicast UAPI of
 * the patched kernel (<linux/un.h>: SOL_UNIX, UNIX_CREATE_GROUP,
 * UNIX_PASSID, SCM_UNIX_SENDER_ID, SCM_UNIX_DELIVERY, SCM_UNIX_DIRECT,
 * UNIX_PEER_RESUME, UNIX_PEER_DIVERT, UNIX_PEER_DIVERT_SEQ, UNIX_COPY_FILTER,
 * UNIX_PEER_EGRESS_FILTER, UNIX_PEER_FILTER_STAGE,
 * UNIX_GROUP_COPY_FILTER_STAGE, UNIX_GROUP_COMMIT, UNIX_GROUP_COPY_QUEUE,
 * UNIX_GROUP_HOLD, UNIX_GROUP_SENT_TO, UNIX_GROUP_SENDS,
 * UNIX_PEER_ADDRESSEE, UNIX_COPY_UNCLAIMED, struct unix_mreq, struct
 * unix_accept_req, struct unix_sends) and tells the rest of libdbus
 * whether it is there.  The kernel header is the single source of
 * truth for the numbers; libdbus keeps no copy of them.  tools/build/dbus
 * puts the patched kernel's exported headers (build/kernel-headers) on the
 * include path; built against a <linux/un.h> without the multicast UAPI
 * (a stock distribution header), DBUS_HAVE_MCAST_UAPI stays undefined and
 * the multicast code is compiled out: unixseq: then always behaves as a
 * classic transport, as it does at run time on a kernel without the
 * feature.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */
#ifndef DBUS_MCAST_UAPI_H
#define DBUS_MCAST_UAPI_H

/* glibc's <sys/un.h> must come first: <linux/un.h> then leaves struct
 * sockaddr_un to it (<linux/libc-compat.h>). */
#include <sys/socket.h>
#include <sys/un.h>
#include <linux/un.h>

#if defined (SOL_UNIX) && defined (UNIX_CREATE_GROUP) && \
    defined (UNIX_PASSID) && defined (SCM_UNIX_SENDER_ID) && \
    defined (SCM_UNIX_DELIVERY) && defined (UNIX_PEER_RESUME) && \
    defined (UNIX_PEER_DIVERT_SEQ) && defined (SCM_UNIX_DIRECT) && \
    defined (UNIX_COPY_FILTER) && defined (UNIX_PEER_EGRESS_FILTER) && \
    defined (UNIX_GROUP_COMMIT) && defined (UNIX_GROUP_COPY_FILTER_STAGE) && \
    defined (UNIX_GROUP_COPY_QUEUE) && defined (UNIX_GROUP_HOLD) && \
    defined (UNIX_GROUP_SENT_TO) && defined (UNIX_GROUP_SENDS) && \
    defined (UNIX_PEER_ADDRESSEE) && defined (UNIX_COPY_UNCLAIMED) && \
    defined (UNIX_ACCEPT_REQ_SIZE_VER0)
#define DBUS_HAVE_MCAST_UAPI 1
#endif

#endif /* DBUS_MCAST_UAPI_H */
