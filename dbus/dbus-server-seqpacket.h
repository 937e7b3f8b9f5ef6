/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-server-seqpacket.h  Server side of the "unixseq:" transport
 *
 * What this module is for: dbus_server_listen() (and so dbus-daemon's
 * <listen> element and --address option) on a Unix SOCK_SEQPACKET socket:
 *
 *   unixseq:path=/run/dbus/seq_socket     a socket file at that path
 *   unixseq:abstract=NAME                 a Linux abstract socket
 *   unixseq:dir=/tmp, unixseq:tmpdir=/tmp a new socket file dbus-seq-XXXXXXXXXX
 *                                         in that directory
 *
 * The listening server is the ordinary socket server: it accepts, and the
 * socket transport it creates for each client switches to packet I/O
 * because the accepted socket is SOCK_SEQPACKET.
 *
 * On a kernel with multicast AF_UNIX groups the listening socket is a
 * group (dbus-sysdeps-seqpacket.h).  Its clients can then be promoted into
 * the group (doc/design.md), but only once the server's owner offers it
 * with _dbus_server_socket_set_mcast_offered() (dbus-server-socket.h):
 * clients accepted from then on agree to NEGOTIATE_MULTICAST, and
 * _dbus_connection_get_mcast_negotiated() tells the owner which ones
 * asked.  Admitting them (UNIX_PEER_ID, UNIX_PEER_FILTER,
 * UNIX_ACCEPT_GROUP on dbus_connection_get_socket()) is the owner's job:
 * dbus-daemon's.  Offering is off by default, so a peer-to-peer server on
 * unixseq: behaves as on a kernel without groups.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */
#ifndef DBUS_SERVER_SEQPACKET_H
#define DBUS_SERVER_SEQPACKET_H

#include <dbus/dbus-server-protected.h>

DBUS_BEGIN_DECLS

DBusServer *_dbus_server_new_for_seqpacket (const char  *path,
                                            dbus_bool_t  abstract,
                                            DBusError   *error);

DBusServerListenResult _dbus_server_listen_seqpacket (DBusAddressEntry  *entry,
                                                      DBusServer       **server_p,
                                                      DBusError         *error);

DBUS_END_DECLS

#endif /* DBUS_SERVER_SEQPACKET_H */
