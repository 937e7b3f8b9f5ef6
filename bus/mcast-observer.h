/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-observer.h  dbus-daemon's own member of its multicast group: the
 *                   members' messages in the kernel's order, for monitors
 *
 * What this module is for: stock dbus-daemon shows its monitors every
 * message in the one order it handles them.  Members' messages do not pass
 * the daemon, and reading them from each sender's socket would give
 * monitors one order per sender only (a reply after the caller's next
 * call).  So the daemon is a member of its group itself, one that never
 * sends: once its listening socket is a group on which it offers
 * promotion (the first such socket only: one group), it connects to
 * it, claims that connection when its server accepts it
 * (bus_mcast_observer_claim(), before any authentication, by
 * the peer's address, an abstract name the kernel bound it to) and admits it with
 * UNIX_MREQ_DIVERT_WHEN_FULL.  Promotion is offered on a group only from
 * then on (bus_mcast_observer_offer()), so no member ever sends while the
 * daemon is not listening.
 *
 * Its peer filter passes nothing while no monitor that the daemon serves
 * is connected, and everything while one is (a classic monitor, or a
 * member that passed match rules to BecomeMonitor:
 * bus_mcast_observer_set_open(), before the BecomeMonitor reply).  The
 * daemon reads it when it is readable and before any transaction of its
 * own goes out (bus_mcast_observer_drain()), and shows each message to
 * its monitors as stock would have, so they see the group in the
 * kernel's order, and what the daemon sends after it, in the order it
 * sends it.  What the daemon's own member has no room for the kernel
 * diverts to the daemon's end of that connection, where it is read next:
 * no member ever waits for the daemon to read.  That end is also the
 * group's copy queue (UNIX_GROUP_COPY_QUEUE): every member's copy for the
 * daemon, in the group's order, which the drain hands to routing
 * (bus_mcast_routing_take_copy()); routing dispatches them from the main
 * loop (bus_mcast_routing_route_copies()).
 *
 * Calls between members do not pass the daemon, whose stock NoReply
 * error to a call whose callee left (which the caller's libdbus makes
 * itself, dbus-mcast-member.h) monitors would not see.  So while
 * monitors are connected the daemon's member remembers the calls to
 * members it reads until their replies, and when a callee leaves,
 * bus_mcast_observer_departed() shows the monitors stock's error for
 * each call it never answered.  The calls made before the first monitor
 * came it takes from the tables in which members list the calls they
 * await (dbus/dbus-mcast-calls.h): bus_mcast_observer_new_calls() makes
 * a member's table, and the Calls signal that hands it over, at its
 * admission.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#ifndef BUS_MCAST_OBSERVER_H
#define BUS_MCAST_OBSERVER_H

#include <dbus/dbus.h>
#include <dbus/dbus-list.h>
#include "bus.h"

BusMcastObserver *bus_mcast_observer_new      (BusContext       *context);
void              bus_mcast_observer_free     (BusMcastObserver *observer);

void              bus_mcast_observer_offer    (BusMcastObserver *observer,
                                               DBusList         *servers,
                                               dbus_bool_t       offered);
dbus_bool_t       bus_mcast_observer_offers   (BusMcastObserver *observer);
dbus_bool_t       bus_mcast_observer_claim    (BusMcastObserver *observer,
                                               DBusServer       *server,
                                               DBusConnection   *connection);
dbus_bool_t       bus_mcast_observer_set_open (BusMcastObserver *observer,
                                               dbus_bool_t       open,
                                               DBusError        *error);
/* Once the observer is open and the group committed since: takes the
 * calls between members made before, from the members' tables */
void              bus_mcast_observer_take_listed_calls (BusMcastObserver *observer);
void              bus_mcast_observer_drain    (BusMcastObserver *observer);
/* Whether a drain is showing monitors what it read (in whose
 * transactions nothing changes but what monitors see) */
dbus_bool_t       bus_mcast_observer_is_draining (BusMcastObserver *observer);
/* Makes members' group sends wait (UNIX_GROUP_HOLD on the copy queue),
 * or lets them go once every hold is released; FALSE if there is no group
 * to hold or the kernel refused */
dbus_bool_t       bus_mcast_observer_hold     (BusMcastObserver *observer,
                                               dbus_bool_t       held);
void              bus_mcast_observer_departed (BusMcastObserver *observer,
                                               const char       *name);
/* The Calls signal for the member @connection, with its new table; NULL
 * with @error set on failure */
DBusMessage      *bus_mcast_observer_new_calls (BusMcastObserver *observer,
                                                DBusConnection   *connection,
                                                DBusError        *error);
void              bus_mcast_observer_forget_calls (BusMcastObserver *observer,
                                                   DBusConnection   *connection);
/* Whether the member @connection may await a reply from one of the
 * members @departed (kernel ids) left: its table lists a call to one of
 * them, or one whose callee it does not know yet.  A member without a
 * table sends its calls through the daemon. */
dbus_bool_t       bus_mcast_observer_awaits   (BusMcastObserver    *observer,
                                               DBusConnection      *connection,
                                               const dbus_uint64_t *departed,
                                               int                  n_departed);

#endif /* BUS_MCAST_OBSERVER_H */
