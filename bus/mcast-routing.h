/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-routing.h  What dbus-daemon still routes for members of the
 *                  multicast group, and what it must not route again
 *
 * What this module is for: a message the daemon reads from a member came
 * either from the group (a copy, UNIX_MREQ_SEND_TO_PEER, that the daemon's
 * copy filter let through because the daemon has a part in it) or
 * straight to the daemon with SCM_UNIX_DIRECT (it carries fds, or spans
 * several packets).  The kernel queues the copies of all members on one
 * socket in the group's order (UNIX_GROUP_COPY_QUEUE), and this module
 * dispatches them in that order, before anything a member sent straight
 * after them, so that no client sees an answer before what it answers.  The kernel already delivered a group message to every
 * member whose filter wanted it, monitors included, so the daemon routes
 * it only to everyone else: the bus driver, classic clients, activation,
 * errors.  Monitors the daemon serves see it from the daemon's own member
 * of the group, in the kernel's order (mcast-observer.h).  A message that came straight is routed like on a stock bus, and
 * once the daemon lets go of it the sender gets the fence signal that
 * lets it write again (doc/design.md, "How a message flows").  Every
 * recipient gets its own copy of such a message, so that no recipient
 * that stopped reading holds the fence back: classic clients get
 * everything through the daemon, in order anyway, and a member's group
 * copies are held at the daemon behind its copy until that is written
 * (mcast-spill.h), so that nothing the sender sends after the fence can
 * overtake it.  Calls between members do not pass the daemon either:
 * when members leave, every other member gets one Departed signal for
 * all that left since the last one (dbus-mcast-member.h), from which its
 * libdbus answers the calls the departed members will never answer with
 * stock's NoReply error.  For the same reason the caller's libdbus
 * counts its calls against max_replies_per_connection, and sends the
 * daemon alone a call over it, which the daemon refuses as stock does
 * (bus_mcast_routing_over_reply_limit(), dbus-mcast-member.h).
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#ifndef BUS_MCAST_ROUTING_H
#define BUS_MCAST_ROUTING_H

#include <dbus/dbus.h>
#include <dbus/dbus-list.h>
#include <dbus/dbus-mainloop.h>
#include "bus.h"

/* Messages dbus-daemon read from its clients since it started: all of
 * them, and of those, the members' copies from the group and their
 * messages that came straight (org.freedesktop.DBus.Debug.Stats). */
typedef struct
{
  dbus_uint32_t dispatched;
  dbus_uint32_t from_group;
  dbus_uint32_t straight;
} BusMcastRoutingStats;

BusMcastRouting *bus_mcast_routing_new                 (BusContext      *context);
void             bus_mcast_routing_free                (BusMcastRouting *routing);

/* A packet the kernel queued on the group's copy queue
 * (UNIX_GROUP_COPY_QUEUE, which the daemon's own member reads): member
 * @sender_id's message as the group delivered it when it had made
 * @commits commits, kept until bus_mcast_routing_route_copies() */
void             bus_mcast_routing_take_copy           (BusMcastRouting  *routing,
                                                        dbus_uint64_t     sender_id,
                                                        dbus_uint32_t     commits,
                                                        const DBusString *packet,
                                                        int               len);
/* Reads what the kernel queued for the daemon and dispatches every copy,
 * in the group's order, as if read from its sender's connection; from the
 * main loop, and before a member's own message is dispatched */
void             bus_mcast_routing_route_copies        (BusMcastRouting *routing);

dbus_bool_t      bus_mcast_routing_received            (BusMcastRouting *routing,
                                                        DBusConnection  *sender,
                                                        DBusMessage     *message);
dbus_bool_t      bus_mcast_routing_observed            (DBusMessage     *message);
dbus_bool_t      bus_mcast_routing_delivered_by_kernel (DBusConnection  *recipient,
                                                        DBusMessage     *message);
/* One of the daemon's private signals whose body is one u (Routed,
 * ReplyLimit; dbus-mcast-member.h) for member @recipient.  NULL if no
 * memory. */
DBusMessage     *bus_mcast_routing_new_signal          (DBusConnection  *recipient,
                                                        const char      *member,
                                                        dbus_uint32_t    argument);
/* A member's message to the well-known name of @service, read after the
 * name went into a member's hands: routed as the name stood when it was
 * sent (to nobody, @service then NULL, or to the classic client that
 * owned it).  FALSE if that client has gone since: the message is
 * captured for monitors and needs no delivery; @error is then set to
 * stock's NoReply for a call that wants a reply (or without memory). */
dbus_bool_t      bus_mcast_routing_route_as_sent       (BusTransaction  *transaction,
                                                        DBusConnection  *sender,
                                                        DBusMessage     *message,
                                                        BusService     **service,
                                                        DBusError       *error);
dbus_bool_t      bus_mcast_routing_over_reply_limit    (DBusMessage     *message);
void             bus_mcast_routing_hand_over           (DBusMessage     *message);
DBusMessage     *bus_mcast_routing_for_recipient       (DBusConnection  *recipient,
                                                        DBusMessage     *message);
void             bus_mcast_routing_execute_monitors_first (DBusList    **connections);
void             bus_mcast_routing_fence               (BusMcastRouting *routing,
                                                        DBusConnection  *sender,
                                                        DBusMessage     *message);
void             bus_mcast_routing_departed            (BusMcastRouting *routing,
                                                        BusMcastMembers *members,
                                                        DBusConnection  *connection);
/* A member was told the reply limit @limit: it may await that many
 * replies, each of which may end with a NoReply error its libdbus
 * numbers from a Departed signal's block of serials */
void             bus_mcast_routing_told_reply_limit    (BusMcastRouting *routing,
                                                        dbus_uint32_t    limit);
void             bus_mcast_routing_get_stats           (BusMcastRouting      *routing,
                                                        BusMcastRoutingStats *stats);

#endif /* BUS_MCAST_ROUTING_H */
