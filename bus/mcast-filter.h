/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-filter.h  The match-to-BPF compiler: what a socket of the multicast
 *                 group may receive, as a classic BPF program
 *
 * What this module is for: on a multicast bus the kernel, not dbus-daemon,
 * decides which member receives a message, by running a classic BPF
 * program over the D-Bus message (the packet starts with the fixed header).
 * dbus-daemon describes what a socket must receive (names, match rules)
 * and this module compiles the description into such a program:
 *
 *  - BUS_MCAST_FILTER_MEMBER, the peer filter of a member
 *    (UNIX_PEER_FILTER): a message with a DESTINATION passes only if the
 *    destination is one of the added names, or if an added eavesdropping
 *    rule matches it; a signal without DESTINATION passes if an added rule
 *    may match it; nothing else passes.  Broadcasts may pass more than the
 *    rules ask (libdbus checks them again, dbus/dbus-match-rule.h), a
 *    message addressed to someone else never does, unless an eavesdropping
 *    rule asks for it.
 *  - BUS_MCAST_FILTER_DAEMON, dbus-daemon's copy filter for its end of
 *    every member's connection (UNIX_GROUP_COPY_FILTER_STAGE), which
 *    selects the copies of what members send to the group
 *    (UNIX_MREQ_SEND_TO_PEER): a
 *    message with a DESTINATION passes if an added eavesdropping rule
 *    matches it, else only if no member's filter claimed it
 *    (UNIX_COPY_UNCLAIMED: the destination is no member's name, as the
 *    members' filters say, committed with them); a message without
 *    DESTINATION passes if it is not a signal (the bus driver's) or an
 *    added rule may match it.  It lists no names, so members coming,
 *    going and taking names leave it as it is.  Looser is always safe
 *    here: dbus-daemon routes what it receives exactly.
 *  - bus_mcast_filter_accept_all(): everything passes (monitors).
 *
 * Only messages in the host's byte order pass a member's filter
 * (dbus-daemon converts what it forwards); a packet that is not a
 * well-formed D-Bus header is dropped by a member's filter and passed by
 * the daemon's, which then disconnects the sender like any peer that sends
 * garbage.
 *
 * The program never exceeds BPF_MAXINSNS: when the exact program would,
 * the compiler loosens how broadcasts are matched, step by step (see
 * BusMcastPrecision), but never how destinations are (the daemon's last
 * resort is every message with a destination).
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#ifndef BUS_MCAST_FILTER_H
#define BUS_MCAST_FILTER_H

#include <dbus/dbus.h>
#include <dbus/dbus-match-rule.h>
#include <linux/filter.h>

typedef enum
{
  BUS_MCAST_FILTER_MEMBER,
  BUS_MCAST_FILTER_DAEMON
} BusMcastFilterKind;

/** How closely the compiled program follows the added rules, from the
 * most to the least exact.  Names (destinations) are always exact. */
typedef enum
{
  BUS_MCAST_PRECISION_EXACT,      /**< every key of every rule */
  BUS_MCAST_PRECISION_NO_ARGS,    /**< argN, argNpath, arg0namespace not checked */
  BUS_MCAST_PRECISION_SENDERS,    /**< of the rules with a sender, only the
                                   *   sender checked; the others as NO_ARGS */
  BUS_MCAST_PRECISION_SIGNALS     /**< every broadcast signal passes */
} BusMcastPrecision;

typedef struct
{
  struct sock_filter *insns;      /**< dbus_free() it, or bus_mcast_program_clear() */
  unsigned short len;             /**< number of instructions, <= BPF_MAXINSNS */
  BusMcastPrecision precision;    /**< what was dropped to fit */
} BusMcastProgram;

typedef struct BusMcastFilter BusMcastFilter;

BusMcastFilter *bus_mcast_filter_new        (BusMcastFilterKind  kind);
void            bus_mcast_filter_free       (BusMcastFilter     *filter);
/* A member's names (BUS_MCAST_FILTER_MEMBER only) */
dbus_bool_t     bus_mcast_filter_add_name   (BusMcastFilter     *filter,
                                             const char         *name);
/* @sender_owner: when rule->sender is a well-known name, the unique name
 * owning it now (NULL if none: the sender key then matches nothing); the
 * program compares the SENDER header field, which receivers check against
 * the kernel's sender id.  Ignored for rules without a well-known sender.
 * For sender='org.freedesktop.DBus' pass that name itself: the bus
 * driver's messages carry it as SENDER.
 * The rule is neither copied nor referenced: the caller keeps it alive
 * and unchanged until bus_mcast_filter_free(). */
dbus_bool_t     bus_mcast_filter_add_rule   (BusMcastFilter     *filter,
                                             DBusMatchRule      *rule,
                                             const char         *sender_owner);
void            bus_mcast_filter_accept_all (BusMcastFilter     *filter);
dbus_bool_t     bus_mcast_filter_compile    (BusMcastFilter     *filter,
                                             BusMcastProgram    *program,
                                             DBusError          *error);
void            bus_mcast_program_clear     (BusMcastProgram    *program);

#endif /* BUS_MCAST_FILTER_H */
