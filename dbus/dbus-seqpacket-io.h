/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-seqpacket-io.h  Packet I/O and framing for SOCK_SEQPACKET transports
 *
 * What this module is for: a SOCK_SEQPACKET socket preserves packet
 * boundaries, so it cannot be read like a byte stream (a short read throws
 * the rest of the packet away) and it is the unit the kernel multicast
 * group delivers.  This module moves whole packets between the socket
 * and libdbus' buffers and enforces the dbus-mcast framing (see
 * doc/dbus-fork.md):
 *
 *  - before BEGIN (SASL and the credentials byte) packets are stream data;
 *  - after BEGIN every D-Bus message starts a new packet; a message of at
 *    most DBUS_SEQPACKET_FRAGMENT_SIZE bytes is exactly one packet, a longer
 *    one is sent as consecutive packets of exactly that size, the last one
 *    holding the rest; unix fds travel with the first packet.
 *
 * On a connection that was promoted into a kernel multicast group
 * (doc/design.md) every received packet carries the kernel's sender id,
 * and dbus-mcast-member.h decides what to do with each message; this
 * module still does the I/O.
 *
 * On the daemon's end of such a connection, the kernel may also deliver
 * copies of other members' messages that it diverted from the member
 * because the member's socket was full (SCM_UNIX_DELIVERY).  Each is a
 * whole message; it is queued like any message read, marked with
 * _dbus_seqpacket_message_get_diverted() (a copy that is not a valid
 * message is queued as an empty local signal marked invalid, so that its
 * sequence number is not lost), and when the daemon sends that
 * message back to the member, it goes out under its original sender's id
 * (SCM_UNIX_SENDER_ID), so that the member sees what the group would have
 * delivered.  Copies of members' messages for the daemon
 * (UNIX_MREQ_SEND_TO_PEER) do not come here: the kernel queues them all
 * on one socket, in the group's order (_dbus_seqpacket_read_group_packet()).
 *
 * A receiver that sees anything else (a packet holding more than one
 * message, a short fragment, a fragment that is too long, an invalid fixed
 * header) fails the read with EPROTO, and the transport disconnects that
 * peer; on the server side (dbus-daemon) the violation is also logged as a
 * warning naming the peer's pid.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */
#ifndef DBUS_SEQPACKET_IO_H
#define DBUS_SEQPACKET_IO_H

#include <dbus/dbus-internals.h>
#include <dbus/dbus-message.h>
#include <dbus/dbus-message-internal.h>
#include <dbus/dbus-string.h>
#include <dbus/dbus-sysdeps.h>

DBUS_BEGIN_DECLS

/** Largest packet a sender puts on the wire after BEGIN; part of the
 * protocol (a receiver checks that fragments of a long message have
 * exactly this size). 64 KiB fits the default socket buffer
 * (net.core.wmem_default, 208 KiB) with room for several packets, needs no
 * privileged SO_SNDBUFFORCE and keeps kernel allocations small. */
#define DBUS_SEQPACKET_FRAGMENT_SIZE 65536

/** Largest packet accepted before BEGIN (the SASL buffer limit). */
#define DBUS_SEQPACKET_MAX_AUTH_PACKET 16384

/** Receive-side state of one connection: where we are in the current
 * message. */
typedef struct DBusSeqpacketFraming DBusSeqpacketFraming;

/** A copy of a group message the kernel diverted from a full member to
 * the daemon's end of its connection */
typedef struct
{
  dbus_uint32_t seq;        /**< the member's divert sequence number, from 1 */
  dbus_uint64_t sender_id;  /**< the kernel's id of the member that sent it */
  dbus_bool_t invalid;      /**< not a valid message: it stands in for one
                                 the member would drop, so that the daemon
                                 still learns its seq */
} DBusSeqpacketDiverted;

DBusSeqpacketFraming *_dbus_seqpacket_framing_new   (dbus_bool_t           server);
void                  _dbus_seqpacket_framing_free  (DBusSeqpacketFraming *framing);
dbus_bool_t           _dbus_seqpacket_framing_start (DBusSeqpacketFraming *framing,
                                                     DBusSocket            fd,
                                                     dbus_bool_t           multicast,
                                                     DBusError            *error);
dbus_bool_t           _dbus_seqpacket_may_write     (DBusSeqpacketFraming *framing);
dbus_bool_t           _dbus_seqpacket_write_blocked (DBusSeqpacketFraming *framing);
void                  _dbus_seqpacket_writable      (DBusSeqpacketFraming *framing);
dbus_bool_t           _dbus_seqpacket_prepare_message (DBusSeqpacketFraming *framing,
                                                       DBusMessage          *message);

dbus_bool_t _dbus_socket_is_seqpacket (DBusSocket fd);

int _dbus_seqpacket_read_stream    (DBusSocket            fd,
                                    DBusString           *buffer);
int _dbus_seqpacket_write_stream   (DBusSocket            fd,
                                    const DBusString     *buffer,
                                    int                   start,
                                    int                   len);
int _dbus_seqpacket_read_message   (DBusSeqpacketFraming *framing,
                                    DBusSocket            fd,
                                    DBusString           *buffer,
                                    int                  *fds,
                                    unsigned int         *n_fds);
dbus_bool_t _dbus_seqpacket_place_pending (DBusSeqpacketFraming *framing,
                                           DBusMessageLoader    *loader);
DBUS_PRIVATE_EXPORT
int _dbus_seqpacket_read_group_packet (DBusSocket             fd,
                                       DBusString            *buffer,
                                       dbus_uint64_t         *sender_id,
                                       DBusSeqpacketDiverted *diverted,
                                       dbus_int64_t          *commits);

DBUS_PRIVATE_EXPORT
dbus_bool_t                  _dbus_seqpacket_marks_init           (void);
DBUS_PRIVATE_EXPORT
void                         _dbus_seqpacket_marks_deinit         (void);
DBUS_PRIVATE_EXPORT
const DBusSeqpacketDiverted *_dbus_seqpacket_message_get_diverted (DBusMessage *message);
int _dbus_seqpacket_write_message  (DBusSeqpacketFraming *framing,
                                    DBusSocket            fd,
                                    const DBusString     *header,
                                    const DBusString     *body,
                                    int                   bytes_already_written,
                                    const int            *fds,
                                    int                   n_fds);

DBUS_END_DECLS

#endif /* DBUS_SEQPACKET_IO_H */
