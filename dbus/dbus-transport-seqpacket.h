/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-transport-seqpacket.h  Client side of the "unixseq:" transport
 *
 * What this module is for: opening a connection to a "unixseq:" address,
 * a Unix SOCK_SEQPACKET socket:
 *
 *   unixseq:path=/run/user/1000/bus-seq
 *   unixseq:abstract=/tmp/dbus-XXXXXXXXXX
 *
 * (servers also accept dir= and tmpdir=, see dbus-server-seqpacket.h).
 * The connection itself is the ordinary socket transport, which switches
 * to packet I/O (dbus-seqpacket-io.h) when its socket is SOCK_SEQPACKET.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */
#ifndef DBUS_TRANSPORT_SEQPACKET_H
#define DBUS_TRANSPORT_SEQPACKET_H

#include <dbus/dbus-transport-protected.h>

DBUS_BEGIN_DECLS

/** The transport name of SOCK_SEQPACKET addresses */
#define DBUS_SEQPACKET_TRANSPORT_NAME "unixseq"

dbus_bool_t    _dbus_seqpacket_append_address    (DBusString   *address,
                                                  const char   *path,
                                                  dbus_bool_t   abstract);

DBusTransport *_dbus_transport_new_for_seqpacket (const char   *path,
                                                  dbus_bool_t   abstract,
                                                  DBusError    *error);

DBusTransportOpenResult _dbus_transport_open_seqpacket (DBusAddressEntry  *entry,
                                                        DBusTransport    **transport_p,
                                                        DBusError         *error);

DBUS_END_DECLS

#endif /* DBUS_TRANSPORT_SEQPACKET_H */
