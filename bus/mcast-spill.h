/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-spill.h  The copies the kernel diverted from a full member
 *
 * What this module is for: members are admitted with
 * UNIX_MREQ_DIVERT_WHEN_FULL, so that one that stops reading (a program
 * stopped in a debugger) holds nobody back.  When a member's socket is
 * full, the kernel queues its copies of group messages on the daemon's end
 * of its connection instead, numbered, and every later copy for it until
 * the daemon resumes it (dbus-seqpacket-io.h: diverted copies).  The
 * daemon keeps them as stock dbus-daemon keeps what a slow reader is sent:
 * in the member's outgoing queue, within the bus's max_outgoing_bytes and
 * max_outgoing_unix_fds, refused beyond them with stock's LimitsExceeded
 * error to a caller and stock's log line.  It writes them to the member
 * under their senders' ids, so the member sees what the group would have
 * delivered.  Once every copy it read is written or refused, it asks the
 * kernel to deliver to the member directly again (UNIX_PEER_RESUME); the
 * kernel refuses while newer copies wait on the socket, and the daemon
 * asks again after those.  Order and exactly-once delivery hold across
 * both switches (Documentation/networking/multicast-unix-sockets.rst).
 * The daemon also diverts a member itself (UNIX_PEER_DIVERT) while a
 * message it routed to it waits to be written, so that what the sender
 * sends next through the group cannot overtake it: the sender need not
 * wait for a slow recipient (mcast-routing.h, the fence).
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#ifndef BUS_MCAST_SPILL_H
#define BUS_MCAST_SPILL_H

#include <dbus/dbus.h>
#include <dbus/dbus-mainloop.h>
#include "bus.h"

/* Diverted copies the daemon read since it started, those it refused
 * (limits), how often it resumed a member, and how often it diverted one
 * itself to hold its copies behind a routed message (Debug.Stats.GetStats) */
typedef struct
{
  dbus_uint32_t diverted;
  dbus_uint32_t refused;
  dbus_uint32_t resumes;
  dbus_uint32_t holds;
} BusMcastSpillStats;

BusMcastSpill *bus_mcast_spill_new       (BusContext     *context);
void           bus_mcast_spill_free      (BusMcastSpill  *spill);

dbus_bool_t    bus_mcast_spill_take      (BusMcastSpill  *spill,
                                          DBusConnection *connection,
                                          DBusMessage    *message);
dbus_bool_t    bus_mcast_spill_hold      (BusMcastSpill  *spill,
                                          DBusConnection *connection,
                                          DBusMessage    *copy);
dbus_bool_t    bus_mcast_spill_send_later (BusMcastSpill        *spill,
                                           DBusConnection       *connection,
                                           DBusPreallocatedSend *preallocated,
                                           DBusMessage          *message);
void           bus_mcast_spill_send_behind (BusMcastSpill  *spill,
                                            DBusConnection *connection,
                                            DBusMessage    *message);
void           bus_mcast_spill_disconnected (BusMcastSpill  *spill,
                                             DBusConnection *connection);
void           bus_mcast_spill_get_stats (BusMcastSpill      *spill,
                                          BusMcastSpillStats *stats);

#endif /* BUS_MCAST_SPILL_H */
