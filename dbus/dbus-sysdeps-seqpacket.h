/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-sysdeps-seqpacket.h  Unix SOCK_SEQPACKET sockets: connect and listen
 *
 * What this module is for: the SOCK_SEQPACKET counterparts of
 * _dbus_connect_unix_socket() and _dbus_listen_unix_socket() (which only
 * make SOCK_STREAM sockets).  Same naming rules: a path in the file system
 * or a Linux abstract name.  Returned sockets are non-blocking and
 * close-on-exec.  On a kernel with multicast AF_UNIX groups, the listening
 * socket is a group and the socket options a member needs are set here
 * (the kernel interface is reached through dbus-mcast-uapi.h).
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */
#ifndef DBUS_SYSDEPS_SEQPACKET_H
#define DBUS_SYSDEPS_SEQPACKET_H

#include <dbus/dbus-internals.h>
#include <dbus/dbus-sysdeps.h>

DBUS_BEGIN_DECLS

DBUS_PRIVATE_EXPORT
DBusSocket _dbus_connect_unix_seqpacket (const char  *path,
                                         dbus_bool_t  abstract,
                                         dbus_bool_t  own,
                                         DBusError   *error);
DBusSocket _dbus_listen_unix_seqpacket  (const char  *path,
                                         dbus_bool_t  abstract,
                                         dbus_bool_t *is_group,
                                         DBusError   *error);

dbus_bool_t _dbus_seqpacket_mcast_supported (DBusSocket  fd);
DBUS_PRIVATE_EXPORT
dbus_bool_t _dbus_seqpacket_set_passid          (DBusSocket  fd,
                                                 DBusError  *error);
/** Where a member's last send went, as the kernel tells */
typedef enum
{
  DBUS_SEQPACKET_SENT_UNKNOWN,   /**< the kernel cannot tell */
  DBUS_SEQPACKET_SENT_TO_DAEMON, /**< to no member as its addressee */
  DBUS_SEQPACKET_SENT_TO_MEMBER  /**< to the member with the id given */
} DBusSeqpacketSent;

DBusSeqpacketSent _dbus_seqpacket_get_sent_to (DBusSocket     fd,
                                               dbus_uint64_t *id);
DBUS_PRIVATE_EXPORT
dbus_bool_t       _dbus_seqpacket_get_sends   (DBusSocket     fd,
                                               dbus_uint64_t *count,
                                               dbus_uint64_t *sent_to);

DBUS_END_DECLS

#endif /* DBUS_SYSDEPS_SEQPACKET_H */
