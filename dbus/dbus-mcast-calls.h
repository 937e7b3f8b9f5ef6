/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-mcast-calls.h  The table in which a member lists the calls it
 *                     awaits, shared with dbus-daemon
 *
 * What this module is for: stock dbus-daemon shows its monitors stock's
 * NoReply error for every call a departing client leaves unanswered,
 * also for calls made before the monitor connected.  Calls between
 * members do not pass the daemon, and its own member of the group reads
 * them only while monitors are connected (bus/mcast-observer.h).  So
 * each member's libdbus lists, in memory it shares with the daemon, the
 * calls to other members it awaits a reply to, and the last replies it
 * sent to members.  When the first monitor comes, the daemon reads every
 * table once: a listed call whose callee is a member that lists no reply
 * to it is unanswered, and its callee's departure shows the monitors its
 * error as if the daemon had seen the call.  When members leave, the
 * daemon tells only the members whose tables list a call to one of them,
 * or one whose callee is not known yet, that they left (the Departed
 * signal, dbus-mcast-member.h).
 *
 * The daemon creates each table (_dbus_mcast_calls_create(): a memfd it
 * can neither grow nor shrink, mapped read-only) and hands the member
 * the fd with the Calls signal before its Hello reply
 * (dbus-mcast-member.h); the member, which allocated its side with the
 * connection (_dbus_mcast_calls_new()), maps it writable
 * (_dbus_mcast_calls_attach()).  Only the member writes.  The daemon
 * trusts a table about its own member's calls only: a member that lies
 * shows monitors errors to itself, or hides them, and the daemon checks
 * every index it reads.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */
#ifndef DBUS_MCAST_CALLS_H
#define DBUS_MCAST_CALLS_H

#include <dbus/dbus-errors.h>
#include <dbus/dbus-internals.h>

DBUS_BEGIN_DECLS

/** The daemon's signal that hands a member its table, from
 * DBUS_SERVICE_DBUS on DBUS_PATH_DBUS, interface DBUS_MCAST_INTERFACE,
 * with the memfd as its one argument; the member consumes it. */
#define DBUS_MCAST_CALLS "Calls"
#define DBUS_MCAST_CALLS_SIGNATURE "h"

/** How many awaited calls a table lists at once; a member sends the
 * calls beyond through the daemon, which then knows them itself */
#define DBUS_MCAST_CALLS_SLOTS 4096
/** How many of a member's last replies to members a table keeps */
#define DBUS_MCAST_CALLS_REPLIES 1024

/** The callee of a listed call to a well-known name before the kernel
 * said which member it reached */
#define DBUS_MCAST_CALLS_UNKNOWN_CALLEE _DBUS_UINT64_MAX

/** A call (in a slot: to the callee @peer) or a reply (in the ring: to
 * the caller @peer) to the call numbered @serial by its caller, listed
 * before it is sent.  It is sent once the kernel counts @sends of the
 * member's messages (UNIX_GROUP_SENDS, counted from the member's
 * admission, while it sends nothing between its Hello and the reply):
 * the daemon tells a reply given from one the member was killed before
 * giving, and a call to a well-known name sent from one not sent yet. */
typedef struct
{
  dbus_uint64_t peer;   /**< kernel sender id; 0 for an empty slot */
  dbus_uint64_t sends;  /**< the member's sends once this one is sent */
  dbus_uint32_t serial;
  dbus_uint32_t padding;
} DBusMcastCallEntry;

/** The shared memory of one member */
typedef struct
{
  dbus_uint32_t n_slots;   /**< slots used so far: the daemon reads below */
  dbus_uint32_t padding;
  /** A ring: the member overwrites the oldest reply */
  DBusMcastCallEntry replies[DBUS_MCAST_CALLS_REPLIES];
  DBusMcastCallEntry calls[DBUS_MCAST_CALLS_SLOTS];
} DBusMcastCallTable;

/* The member's side */
typedef struct DBusMcastCalls DBusMcastCalls;

DBUS_PRIVATE_EXPORT
DBusMcastCalls *_dbus_mcast_calls_new         (void);
DBUS_PRIVATE_EXPORT
void            _dbus_mcast_calls_free        (DBusMcastCalls *calls);
DBUS_PRIVATE_EXPORT
dbus_bool_t     _dbus_mcast_calls_attach      (DBusMcastCalls *calls,
                                               int             fd);
DBUS_PRIVATE_EXPORT
dbus_bool_t     _dbus_mcast_calls_is_attached (DBusMcastCalls *calls);
DBUS_PRIVATE_EXPORT
void            _dbus_mcast_calls_sent        (DBusMcastCalls *calls);
DBUS_PRIVATE_EXPORT
int             _dbus_mcast_calls_add         (DBusMcastCalls *calls,
                                               dbus_uint64_t   callee,
                                               dbus_uint32_t   serial);
DBUS_PRIVATE_EXPORT
void            _dbus_mcast_calls_set_callee  (DBusMcastCalls *calls,
                                               int             slot,
                                               dbus_uint64_t   callee);
DBUS_PRIVATE_EXPORT
void            _dbus_mcast_calls_remove      (DBusMcastCalls *calls,
                                               int             slot);
DBUS_PRIVATE_EXPORT
void            _dbus_mcast_calls_replied     (DBusMcastCalls *calls,
                                               dbus_uint64_t   caller,
                                               dbus_uint32_t   serial,
                                               unsigned int    packets);

/* The daemon's side */
DBUS_PRIVATE_EXPORT
dbus_bool_t     _dbus_mcast_calls_create      (int                       *fd,
                                               const DBusMcastCallTable **table,
                                               DBusError                 *error);
DBUS_PRIVATE_EXPORT
void            _dbus_mcast_calls_unmap       (const DBusMcastCallTable  *table);
DBUS_PRIVATE_EXPORT
dbus_bool_t     _dbus_mcast_calls_get_call    (const DBusMcastCallTable  *table,
                                               unsigned int               slot,
                                               DBusMcastCallEntry        *call);
DBUS_PRIVATE_EXPORT
dbus_bool_t     _dbus_mcast_calls_has_replied (const DBusMcastCallTable  *table,
                                               dbus_uint64_t              sent,
                                               dbus_uint64_t              caller,
                                               dbus_uint32_t              serial);
DBUS_PRIVATE_EXPORT
unsigned int    _dbus_mcast_calls_get_n_slots (const DBusMcastCallTable  *table);
DBUS_PRIVATE_EXPORT
dbus_bool_t     _dbus_mcast_calls_awaits      (const DBusMcastCallTable  *table,
                                               const dbus_uint64_t       *callees,
                                               int                        n_callees);

DBUS_END_DECLS

#endif /* DBUS_MCAST_CALLS_H */
