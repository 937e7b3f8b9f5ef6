/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-admission.h  Which clients dbus-daemon promotes into the kernel
 *                    multicast group, and the promotion itself
 *
 * What this module is for: the bus offers promotion (SASL
 * AGREE_MULTICAST, dbus/dbus-auth.c) on its unixseq: listeners when the
 * listening socket is a kernel group and the bus policy can be enforced
 * without the daemon looking at each message: no rule denies sending,
 * receiving or eavesdropping, and everything is allowed by default
 * (bus_policy_can_be_filtered(), bus/policy.c), the bus's
 * max_message_size is at least one packet (a member's message up to that
 * size goes through the group, where the daemon cannot refuse it), it
 * has no reply_timeout (the daemon does not see calls between members
 * to time them out), and the daemon mediates nothing through AppArmor or
 * SELinux (nobody could ask them about a group message).  On a group it offers promotion once its own member
 * is in (mcast-observer.h).  At Hello, a client that
 * agreed gets, in this order, its kernel sender id, its peer filter, the
 * daemon's copy filter on its connection, admission with
 * UNIX_MREQ_SEND_TO_PEER and UNIX_MREQ_DIVERT_WHEN_FULL, and the bus's
 * max_replies_per_connection in a ReplyLimit signal (dbus-mcast-member.h;
 * again after every reload), all before the Hello reply is queued
 * (doc/design.md, "Promotion"): a member that stops
 * reading then holds nobody back, and what it misses meanwhile reaches it
 * through the daemon (mcast-spill.h).  A member that becomes a monitor of
 * everything keeps that admission: a monitor that stops reading never
 * holds the bus back, and one that reads sees every message.  One with
 * match rules is served by the daemon, like a classic monitor.  A
 * configuration reload that makes the policy unfit for filters
 * disconnects the members, and a client that agreed before the reload
 * at its Hello: they reconnect and stay on the classic path.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#ifndef BUS_MCAST_ADMISSION_H
#define BUS_MCAST_ADMISSION_H

#include <dbus/dbus.h>
#include <dbus/dbus-list.h>
#include "mcast-members.h"
#include "policy.h"

void        bus_mcast_admission_configure (BusMcastMembers  *members,
                                           BusMcastObserver *observer,
                                           DBusList         *servers,
                                           BusPolicy        *policy,
                                           const BusLimits  *limits);
dbus_bool_t bus_mcast_admission_admit     (BusMcastMembers *members,
                                           DBusConnection  *connection,
                                           DBusError       *error);
dbus_bool_t bus_mcast_admission_monitor   (BusMcastMembers *members,
                                           DBusConnection  *connection,
                                           dbus_bool_t      selective,
                                           DBusError       *error);

#endif /* BUS_MCAST_ADMISSION_H */
