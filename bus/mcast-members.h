/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-members.h  The members of the kernel multicast group, and keeping
 *                  every kernel filter in step with names and match rules
 *
 * What this module is for: once a client is a member (bus/mcast-admission.h)
 * the kernel delivers to it what its peer filter passes, and delivers to
 * dbus-daemon what the daemon's copy filter, one for the whole group
 * (UNIX_GROUP_COPY_FILTER_STAGE), passes (doc/design.md).  Both programs are functions of the bus state:
 * who owns which name, and every connection's match rules (classic
 * clients' rules decide which broadcasts the daemon must see).  This
 * module keeps that state per connection, marks the programs a change
 * affects as stale, and recompiles (bus/mcast-filter.h) and replaces them
 * in bus_mcast_members_flush(), which dbus-daemon calls before any
 * transaction's messages go out: a client that receives the reply to its
 * AddMatch or RequestName, or a NameOwnerChanged, finds the kernel filters
 * already updated.  A name change recompiles only the members it
 * affects: the name's old and new owners and the members whose rules
 * name it as sender; a flush looks up only the names whose owner
 * changed since the last one, so that what it does for a client that
 * joins or adds a rule does not grow with the clients on the bus (it
 * only walks their flags).  Every program a flush changes is staged and
 * installed with one UNIX_GROUP_COMMIT, so a message sees all of them or
 * none; for group copies the daemon reads after a name moved, it keeps
 * which names went into or out of members' hands at which commit, and
 * who owned them before if not a member (bus_mcast_members_owner_then()).
 * A bus without members compiles nothing.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#ifndef BUS_MCAST_MEMBERS_H
#define BUS_MCAST_MEMBERS_H

#include <dbus/dbus.h>
#include <dbus/dbus-string.h>
#include "bus.h"

BusMcastMembers *bus_mcast_members_new            (BusContext        *context);
void             bus_mcast_members_free           (BusMcastMembers   *members);

dbus_bool_t      bus_mcast_members_add            (BusMcastMembers   *members,
                                                   DBusConnection    *connection,
                                                   DBusError         *error);
dbus_bool_t      bus_mcast_members_is_member      (DBusConnection    *connection);
/* The connection that owns @name (unique or well-known) now, its primary
 * owner; NULL if nobody does, or for the bus driver's own name */
DBusConnection  *bus_mcast_owner_of               (BusRegistry       *registry,
                                                   const char        *name);
dbus_bool_t      bus_mcast_members_gets_group_traffic (DBusConnection *connection);
int              bus_mcast_members_get_n_members  (BusMcastMembers   *members);
dbus_uint32_t    bus_mcast_members_get_compilations (BusMcastMembers *members);
const char      *bus_mcast_members_get_precision  (DBusConnection    *connection);
void             bus_mcast_members_disconnected   (BusMcastMembers   *members,
                                                   DBusConnection    *connection);
/* Called for each member the kernel delivers group traffic to */
typedef void (*BusMcastMemberFunction) (DBusConnection *connection,
                                        void           *data);
void             bus_mcast_members_foreach        (BusMcastMembers        *members,
                                                   BusMcastMemberFunction  function,
                                                   void                   *data);
void             bus_mcast_members_close_all      (BusMcastMembers   *members);

dbus_bool_t      bus_mcast_members_add_rule       (BusMcastMembers   *members,
                                                   DBusConnection    *connection,
                                                   const DBusString  *text,
                                                   DBusError         *error);
void             bus_mcast_members_remove_rule    (BusMcastMembers   *members,
                                                   DBusConnection    *connection,
                                                   const DBusString  *text);
dbus_bool_t      bus_mcast_members_become_monitor (BusMcastMembers   *members,
                                                   DBusConnection    *connection,
                                                   dbus_bool_t        selective,
                                                   DBusError         *error);
void             bus_mcast_members_name_owner_changed (BusMcastMembers *members,
                                                       const char      *name,
                                                       const char      *old_owner);

/* Who owned a well-known name when a group copy addressed to it was sent */
typedef enum
{
  BUS_MCAST_OWNER_MEMBER,      /* a member: the kernel delivered the copy to it */
  BUS_MCAST_OWNER_OTHER,       /* a classic client (*other, if known), or as
                                  far as the daemon knows */
  BUS_MCAST_OWNER_NONE         /* nobody */
} BusMcastOwner;

void             bus_mcast_members_flush          (BusMcastMembers   *members);
/* Holds the members' group sends (bus_mcast_observer_hold()) if at least
 * two of @connections, a transaction's recipients, are members that may
 * send: none of them answers another before all have their messages.
 * TRUE if held: bus_mcast_members_release() then lets them go. */
dbus_bool_t      bus_mcast_members_hold           (BusMcastMembers   *members,
                                                   DBusList          *connections);
void             bus_mcast_members_release        (BusMcastMembers   *members);
dbus_uint32_t    bus_mcast_members_get_group_holds (BusMcastMembers  *members);
/* Whether a service file names @name (without memory, taken to) */
dbus_bool_t      bus_mcast_members_is_activatable (BusMcastMembers   *members,
                                                   const char        *name);
BusMcastOwner    bus_mcast_members_owner_then     (BusMcastMembers   *members,
                                                   const char        *name,
                                                   dbus_uint32_t      commits,
                                                   const char       **other);

#endif /* BUS_MCAST_MEMBERS_H */
