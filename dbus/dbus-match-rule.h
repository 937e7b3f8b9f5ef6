/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-match-rule.h  Match rules as libdbus itself parses and evaluates them
 *
 * What this module is for: on a multicast bus a member receives broadcasts straight from the other
 * members, through a kernel peer filter that dbus-daemon compiled from the
 * member's match rules.  The filter may let through more than the rules ask
 * (a classic BPF program has a size limit and no loops), so libdbus checks
 * each broadcast against the connection's own rules before dispatching it,
 * and dbus-daemon compiles the very same parsed form into the filter
 * (bus/mcast-filter.h).  The syntax and meaning are those of the
 * AddMatch method of dbus-daemon 1.14 ("Match Rules" in the D-Bus
 * specification).
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#ifndef DBUS_MATCH_RULE_H
#define DBUS_MATCH_RULE_H

#include <dbus/dbus-hash.h>
#include <dbus/dbus-internals.h>
#include <dbus/dbus-list.h>
#include <dbus/dbus-message.h>
#include <dbus/dbus-string.h>

DBUS_BEGIN_DECLS

/** Which keys a rule has; a key that is absent matches anything. */
typedef enum
{
  DBUS_MATCH_MESSAGE_TYPE            = 1 << 0, /**< type= */
  DBUS_MATCH_INTERFACE               = 1 << 1, /**< interface= */
  DBUS_MATCH_MEMBER                  = 1 << 2, /**< member= */
  DBUS_MATCH_SENDER                  = 1 << 3, /**< sender= */
  DBUS_MATCH_DESTINATION             = 1 << 4, /**< destination= */
  DBUS_MATCH_PATH                    = 1 << 5, /**< path= */
  DBUS_MATCH_ARGS                    = 1 << 6, /**< argN=, argNpath=, arg0namespace= */
  DBUS_MATCH_PATH_NAMESPACE          = 1 << 7, /**< path_namespace= (in path) */
  DBUS_MATCH_CLIENT_IS_EAVESDROPPING = 1 << 8  /**< eavesdrop=true */
} DBusMatchFlags;

/** Or-ed into an entry of arg_lens: argNpath= */
#define DBUS_MATCH_ARG_IS_PATH    0x8000000u
/** Or-ed into arg_lens[0]: arg0namespace= */
#define DBUS_MATCH_ARG_NAMESPACE  0x4000000u
#define DBUS_MATCH_ARG_FLAGS (DBUS_MATCH_ARG_IS_PATH | DBUS_MATCH_ARG_NAMESPACE)

/**
 * A parsed match rule.  Read-only once parsed: the daemon's filter
 * compiler walks the fields directly.
 */
typedef struct
{
  int refcount;               /**< reference count */
  unsigned int flags;         /**< DBusMatchFlags */
  int message_type;           /**< DBUS_MESSAGE_TYPE_*, if flags has it */
  char *interface;            /**< or NULL */
  char *member;               /**< or NULL */
  char *sender;               /**< unique or well-known name, or NULL */
  char *destination;          /**< or NULL */
  char *path;                 /**< path= or path_namespace= value, or NULL */
  /** args[N] is the value of argN (or NULL if the rule does not test
   * argument N); args_len is one more than the highest N tested. */
  char **args;
  /** strlen (args[N]) or-ed with DBUS_MATCH_ARG_* flags */
  unsigned int *arg_lens;
  int args_len;
} DBusMatchRule;

DBUS_PRIVATE_EXPORT
DBusMatchRule *_dbus_match_rule_parse   (const DBusString    *text,
                                         DBusError           *error);
DBUS_PRIVATE_EXPORT
DBusMatchRule *_dbus_match_rule_ref     (DBusMatchRule       *rule);
DBUS_PRIVATE_EXPORT
void           _dbus_match_rule_unref   (DBusMatchRule       *rule);
DBUS_PRIVATE_EXPORT
dbus_bool_t    _dbus_match_rule_equal   (const DBusMatchRule *a,
                                         const DBusMatchRule *b);
/* What RemoveMatch does to a connection's rules: removes (and unrefs) the
 * most recently added rule of @rules equal to @rule; FALSE if none */
DBUS_PRIVATE_EXPORT
dbus_bool_t    _dbus_match_rule_list_remove (DBusList           **rules,
                                             const DBusMatchRule *rule);
/* Whether @message (whose SENDER the transport has already checked against
 * the kernel's sender id) matches @rule, for the connection whose unique
 * name is @receiver.  A sender= key naming a well-known name is resolved
 * through @owners (well-known name -> unique name of its owner, as the
 * daemon told the connection, dbus-mcast-member.h); a name it lacks has
 * no owner. */
DBUS_PRIVATE_EXPORT
dbus_bool_t    _dbus_match_rule_matches (const DBusMatchRule *rule,
                                         DBusMessage         *message,
                                         const char          *receiver,
                                         DBusHashTable       *owners);

DBUS_END_DECLS

#endif /* DBUS_MATCH_RULE_H */
