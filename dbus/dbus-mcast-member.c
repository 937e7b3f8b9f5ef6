/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-mcast-member.c  What a member of a dbus-mcast multicast bus does
 *
 * What this module is for: see dbus-mcast-member.h.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "dbus-mcast-member.h"

#include <stdio.h>

#include "dbus-hash.h"
#include "dbus-list.h"
#include "dbus-mcast-calls.h"
#include "dbus-marshal-basic.h"
#include "dbus-marshal-header.h"
#include "dbus-marshal-validate.h"
#include "dbus-match-rule.h"
#include "dbus-message-internal.h"
#include "dbus-message-private.h"
#include "dbus-protocol.h"
#include "dbus-seqpacket-io.h"
#include "dbus-sysdeps-seqpacket.h"
#include "dbus-sysdeps-unix.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef enum
{
  STATE_BEFORE_HELLO, /**< negotiated; Hello not written yet */
  STATE_HELLO_SENT,   /**< Hello written, its reply not read yet */
  STATE_MEMBER,       /**< the Hello reply was read: a member */
  STATE_NOT_PROMOTED  /**< Hello failed or was not the first message */
} MemberState;

/** A method call this connection sent expecting a reply, or an
 * AddMatch/RemoveMatch the daemon may still refuse */
typedef struct
{
  /** The name the call was addressed to, or #NULL: who may answer it
   * (answered_by_destination()) */
  char *destination;
  /** For AddMatch/RemoveMatch: the rule, or #NULL */
  DBusMatchRule *rule;
  /** For AddMatch: a link holding a reference to rule, ready to join the
   * connection's rules without allocating */
  DBusList *rule_link;
  dbus_bool_t add_match; /**< AddMatch (else RemoveMatch) */
  dbus_bool_t become_monitor; /**< BecomeMonitor */
  /** Already applied: sent without expecting a reply, so the daemon only
   * answers if it refuses (with an error) */
  dbus_bool_t applied;
  /** Counts towards the bus's max_replies_per_connection (counts_reply()) */
  dbus_bool_t counted;
  /** Reached no member as its addressee: the daemon routed it, and
   * answers it if its callee leaves */
  dbus_bool_t routed;
  /** Addressed to a well-known name: the kernel's id of the member whose
   * peer filter held the name when the call was filtered
   * (UNIX_GROUP_SENT_TO), or 0.  That member alone may answer it, and it
   * is lost when that member leaves, wherever the name went. */
  dbus_uint64_t callee_id;
  /** Its slot in the table of calls the daemon reads when monitors come
   * (dbus-mcast-calls.h), or -1 */
  int slot;
} PendingCall;

struct DBusMcastMember
{
  MemberState state;
  char name[DBUS_MAXIMUM_NAME_LENGTH + 1]; /**< our unique name, once a
                                           *   member (no allocation: the
                                           *   Hello reply cannot be read
                                           *   twice) */
  dbus_uint32_t hello_serial;    /**< serial of our Hello */
  dbus_bool_t fenced;            /**< writing is stopped */
  dbus_uint32_t fence_serial;    /**< serial the Routed fence waits for,
                                  *   0 while the Hello fence is up */
  dbus_uint32_t prepared_serial; /**< message being written, 0 once its
                                  *   last packet is */
  dbus_bool_t prepared_direct; /**< it goes to the daemon alone */
  dbus_bool_t prepared_fence;    /**< writing stops after it */
  /** it is a call to a well-known name we await a reply to: once sent,
   * ask the kernel who got it (_dbus_mcast_member_sent()) */
  dbus_bool_t prepared_by_name;
  DBusHashTable *pending;        /**< serial -> PendingCall */
  /** How many of them count towards the reply limit */
  dbus_uint32_t n_counted;
  /** The bus's max_replies_per_connection, as its ReplyLimit signal said */
  dbus_uint32_t reply_limit;
  DBusList *rules;               /**< DBusMatchRule of successful AddMatch */
  /** well-known name -> unique name of its owner, for the names of our
   * rules' sender= keys: what the daemon's Owners signals said */
  DBusHashTable *owners;
  dbus_bool_t monitor;           /**< BecomeMonitor succeeded: the daemon
                                  *   gave us an accept-all filter */
  DBusHeader scratch;            /**< header of the daemon's last message */
  /** The table in which we list our calls to members, once the daemon's
   * Calls signal gave it; without one, such calls go through the daemon */
  DBusMcastCalls *calls;
};

/* Room in the scratch header for the daemon's signals that carry fds (the
 * Calls signal): loading one needs no memory, so its fd is taken from the
 * packet it came with, never left to the message loader */
#define SCRATCH_ROOM 512

static void
pending_call_free (void *data)
{
  PendingCall *call = data;

  if (call == NULL)
    return; /* the hash table frees the "old value" of a new entry */

  if (call->rule_link != NULL)
    {
      _dbus_match_rule_unref (call->rule_link->data);
      _dbus_list_free_link (call->rule_link);
    }
  if (call->rule != NULL)
    _dbus_match_rule_unref (call->rule);
  dbus_free (call->destination);
  dbus_free (call);
}

/**
 * Creates the state of a connection that negotiated multicast, before it
 * has written anything.
 *
 * @returns the state, or #NULL if no memory
 */
DBusMcastMember *
_dbus_mcast_member_new (void)
{
  DBusMcastMember *member = dbus_new0 (DBusMcastMember, 1);

  if (member == NULL)
    return NULL;

  member->pending = _dbus_hash_table_new (DBUS_HASH_UINTPTR, NULL,
                                          pending_call_free);
  if (member->pending == NULL)
    goto failed;

  member->owners = _dbus_hash_table_new (DBUS_HASH_STRING, dbus_free,
                                         dbus_free);
  if (member->owners == NULL)
    goto failed;

  member->calls = _dbus_mcast_calls_new ();
  if (member->calls == NULL)
    goto failed;

  if (!_dbus_header_init (&member->scratch))
    goto failed;
  if (!_dbus_string_set_length (&member->scratch.data, SCRATCH_ROOM))
    {
      _dbus_header_free (&member->scratch);
      goto failed;
    }
  _dbus_header_reinit (&member->scratch);

  /* The daemon says the limit before the Hello reply, and nothing is
   * written before that */
  member->reply_limit = DBUS_MCAST_NO_REPLY_LIMIT;
  member->state = STATE_BEFORE_HELLO;
  return member;

 failed:
  if (member->pending != NULL)
    _dbus_hash_table_unref (member->pending);
  if (member->owners != NULL)
    _dbus_hash_table_unref (member->owners);
  _dbus_mcast_calls_free (member->calls);
  dbus_free (member);
  return NULL;
}

/**
 * Frees what _dbus_mcast_member_new() returned.
 *
 * @param member the state, or #NULL
 */
void
_dbus_mcast_member_free (DBusMcastMember *member)
{
  if (member == NULL)
    return;

  _dbus_list_clear_full (&member->rules,
                         (DBusFreeFunction) _dbus_match_rule_unref);
  _dbus_hash_table_unref (member->pending);
  _dbus_hash_table_unref (member->owners);
  _dbus_header_free (&member->scratch);
  _dbus_mcast_calls_free (member->calls);
  dbus_free (member);
}

/**
 * Whether the connection may write its next message: not while a fence
 * is up.
 *
 * @param member the state
 * @returns #TRUE if writing may go on
 */
dbus_bool_t
_dbus_mcast_member_may_write (DBusMcastMember *member)
{
  return !member->fenced;
}

/**
 * Whether the connection wrote Hello and has not read its reply yet: the
 * daemon may have admitted it already, and packets from the group have to
 * wait for the unique name.
 *
 * @param member the state
 * @returns #TRUE while the Hello reply is awaited
 */
dbus_bool_t
_dbus_mcast_member_waits_for_hello (DBusMcastMember *member)
{
  return member->state == STATE_HELLO_SENT;
}

static dbus_bool_t
is_driver_call (DBusMessage *message,
                const char  *method)
{
  const char *interface = dbus_message_get_interface (message);

  return dbus_message_get_type (message) == DBUS_MESSAGE_TYPE_METHOD_CALL &&
         dbus_message_has_destination (message, DBUS_SERVICE_DBUS) &&
         (interface == NULL || strcmp (interface, DBUS_INTERFACE_DBUS) == 0) &&
         dbus_message_has_member (message, method);
}

/* Whether @message, which we send, counts towards the bus's
 * max_replies_per_connection as dbus-daemon counts it: one that expects a
 * reply from a peer (bus/connection.c, bus_connections_expect_reply()),
 * not from the bus driver, and not one without a destination, which
 * nobody is to answer. */
static dbus_bool_t
counts_reply (DBusMessage *message)
{
  const char *destination = dbus_message_get_destination (message);

  return dbus_message_get_type (message) == DBUS_MESSAGE_TYPE_METHOD_CALL &&
         !dbus_message_get_no_reply (message) && destination != NULL &&
         strcmp (destination, DBUS_SERVICE_DBUS) != 0;
}

/* Removes the call @serial, if we track it */
static void
forget_call (DBusMcastMember *member,
             dbus_uint32_t    serial)
{
  PendingCall *call = _dbus_hash_table_lookup_uintptr (member->pending, serial);

  if (call == NULL)
    return;

  if (call->counted)
    member->n_counted -= 1;
  if (call->slot >= 0)
    _dbus_mcast_calls_remove (member->calls, call->slot);
  _dbus_hash_table_remove_uintptr (member->pending, serial);
}

/* Records a method call we are about to send: one that expects a reply,
 * or an AddMatch/RemoveMatch.  Returns it, or NULL if no memory. */
static PendingCall *
track_call (DBusMcastMember *member,
            DBusMessage     *message)
{
  const char *destination = dbus_message_get_destination (message);
  dbus_bool_t add_match = is_driver_call (message, "AddMatch");
  PendingCall *call, *replaced;
  dbus_bool_t replaced_counted;
  int replaced_slot;
  const char *text;

  call = dbus_new0 (PendingCall, 1);
  if (call == NULL)
    return NULL;
  call->slot = -1;

  if (destination != NULL &&
      (call->destination = _dbus_strdup (destination)) == NULL)
    goto oom;

  if ((add_match || is_driver_call (message, "RemoveMatch")) &&
      dbus_message_get_args (message, NULL, DBUS_TYPE_STRING, &text,
                             DBUS_TYPE_INVALID))
    {
      DBusString str;
      DBusError error = DBUS_ERROR_INIT;

      _dbus_string_init_const (&str, text);
      call->rule = _dbus_match_rule_parse (&str, &error);
      if (call->rule == NULL)
        {
          /* The daemon will refuse it too: nothing to apply */
          dbus_bool_t oom = dbus_error_has_name (&error, DBUS_ERROR_NO_MEMORY);

          dbus_error_free (&error);
          if (oom)
            goto oom;
        }
      else if (add_match)
        {
          call->rule_link = _dbus_list_alloc_link (call->rule);
          if (call->rule_link == NULL)
            goto oom;
          _dbus_match_rule_ref (call->rule);
          call->add_match = TRUE;
        }
    }

  call->become_monitor =
    dbus_message_is_method_call (message, DBUS_INTERFACE_MONITORING,
                                 "BecomeMonitor") &&
    dbus_message_has_destination (message, DBUS_SERVICE_DBUS);
  call->counted = counts_reply (message);

  /* An application may reuse a serial: the new call takes the place of
   * the old one, which the insertion frees */
  replaced = _dbus_hash_table_lookup_uintptr (member->pending,
                                              dbus_message_get_serial (message));
  replaced_counted = replaced != NULL && replaced->counted;
  replaced_slot = replaced != NULL ? replaced->slot : -1;
  if (!_dbus_hash_table_insert_uintptr (member->pending,
                                        dbus_message_get_serial (message),
                                        call))
    goto oom;

  if (replaced_counted)
    member->n_counted -= 1;
  if (replaced_slot >= 0)
    _dbus_mcast_calls_remove (member->calls, replaced_slot);
  if (call->counted)
    member->n_counted += 1;

  return call;

 oom:
  pending_call_free (call);
  return NULL;
}


/* The daemon accepted (or, for a call without reply, will be taken to
 * accept) an AddMatch or RemoveMatch: the connection's rules are now
 * what the daemon compiled into its peer filter. */
static void
apply_rule (DBusMcastMember *member,
            PendingCall     *call)
{
  if (call->add_match)
    {
      _dbus_list_append_link (&member->rules, call->rule_link);
      call->rule_link = NULL;
    }
  else
    _dbus_match_rule_list_remove (&member->rules, call->rule);
  call->applied = TRUE;
}

/* Whether only the peer @call was addressed to may answer it besides the
 * daemon: a unique name, or org.freedesktop.DBus (which no member can
 * claim) */
static dbus_bool_t
answered_by_destination (const PendingCall *call)
{
  return call->destination != NULL &&
         (call->destination[0] == ':' ||
          strcmp (call->destination, DBUS_SERVICE_DBUS) == 0);
}

/* Whether the member @sender (its verified unique name) may answer @call:
 * the peer it was addressed to, or for a call to a well-known name the
 * member the kernel gave it to.  Any member may answer a call the daemon
 * routed, which it may have handed to a member (an activated service). */
static dbus_bool_t
answerable_by (const PendingCall *call,
               const char        *sender)
{
  if (answered_by_destination (call))
    return strcmp (call->destination, sender) == 0;
  if (call->callee_id != 0)
    return _dbus_mcast_sender_id_of_name (sender) == call->callee_id;
  return TRUE;
}

/* A reply to serial arrived from sender.  Returns whether it answers a
 * call we made and that sender may answer; if so the call is complete. */
static dbus_bool_t
answer_call (DBusMcastMember *member,
             dbus_uint32_t    serial,
             const char      *sender,
             dbus_bool_t      from_daemon,
             dbus_bool_t      is_return)
{
  PendingCall *call = _dbus_hash_table_lookup_uintptr (member->pending, serial);

  if (call == NULL)
    return FALSE;

  if (!from_daemon && (sender == NULL || !answerable_by (call, sender)))
    return FALSE;

  if (call->become_monitor && from_daemon && is_return &&
      sender != NULL && strcmp (sender, DBUS_SERVICE_DBUS) == 0)
    member->monitor = TRUE;

  if (call->rule != NULL && from_daemon &&
      sender != NULL && strcmp (sender, DBUS_SERVICE_DBUS) == 0)
    {
      if (is_return && !call->applied)
        apply_rule (member, call);
      else if (!is_return && call->applied && call->add_match)
        _dbus_match_rule_list_remove (&member->rules, call->rule); /* refused after all */
    }

  forget_call (member, serial);
  return TRUE;
}

/* Lists @call, about to be sent to the group as @serial, in the table the
 * daemon reads when monitors come.  FALSE if there is no table or it is
 * full: the call must pass the daemon, which then knows it as stock does. */
static dbus_bool_t
list_call (DBusMcastMember *member,
           PendingCall     *call,
           dbus_uint32_t    serial)
{
  dbus_uint64_t callee = DBUS_MCAST_CALLS_UNKNOWN_CALLEE;

  /* To a well-known name: the callee is known once it is sent */
  if (answered_by_destination (call))
    callee = _dbus_mcast_sender_id_of_name (call->destination);
  call->slot = _dbus_mcast_calls_add (member->calls, callee, serial);
  return call->slot >= 0;
}

/* How many bytes @message is written in */
static int
length_of (DBusMessage *message)
{
  return _dbus_string_get_length (&message->header.data) +
         _dbus_string_get_length (&message->body);
}

/* How many packets @message is written in when it goes to the daemon
 * alone (_dbus_seqpacket_write_message()) */
static unsigned int
packets_of (DBusMessage *message)
{
  return (length_of (message) + DBUS_SEQPACKET_FRAGMENT_SIZE - 1) /
         DBUS_SEQPACKET_FRAGMENT_SIZE;
}

/* Records, before it is sent, that @message answers a member's call */
static void
list_reply (DBusMcastMember *member,
            DBusMessage     *message)
{
  const char *destination = dbus_message_get_destination (message);
  int type = dbus_message_get_type (message);
  dbus_uint64_t caller;

  if (destination == NULL ||
      (type != DBUS_MESSAGE_TYPE_METHOD_RETURN &&
       type != DBUS_MESSAGE_TYPE_ERROR))
    return;

  caller = _dbus_mcast_sender_id_of_name (destination);
  if (caller != 0)
    _dbus_mcast_calls_replied (member->calls, caller,
                               dbus_message_get_reply_serial (message),
                               member->prepared_direct ?
                               packets_of (message) : 1);
}

/**
 * Called before the first packet of message is written.  Returns #FALSE
 * only if no memory; it may be called again for the same message then.
 *
 * @param member the state
 * @param message the message about to be written (locked)
 * @returns #FALSE if no memory
 */
dbus_bool_t
_dbus_mcast_member_prepare (DBusMcastMember *member,
                            DBusMessage     *message)
{
  dbus_uint32_t serial = dbus_message_get_serial (message);
  const char *name = member->name;
  PendingCall *call = NULL;
  const char *sender;
  dbus_bool_t over_limit;

  if (serial == member->prepared_serial)
    return TRUE; /* a retry after EAGAIN or no memory */

  member->prepared_direct = FALSE;
  member->prepared_fence = FALSE;
  member->prepared_by_name = FALSE;

  switch (member->state)
    {
    case STATE_BEFORE_HELLO:
      if (is_driver_call (message, "Hello"))
        {
          member->hello_serial = serial;
          member->prepared_fence = TRUE;
          member->state = STATE_HELLO_SENT;
        }
      else
        {
          _dbus_verbose ("dbus-mcast: first message is not Hello, not a member\n");
          member->state = STATE_NOT_PROMOTED;
        }
      break;

    case STATE_MEMBER:
      /* Over the bus's reply limit: the call goes to the daemon alone,
       * which refuses it as stock does.  It goes without SENDER, which
       * the daemon writes itself, so the daemon can tell it from a call
       * that had to go that way (_dbus_mcast_is_over_reply_limit()). */
      over_limit = counts_reply (message) &&
                   member->n_counted >= member->reply_limit;
      sender = dbus_message_get_sender (message);
      if (over_limit)
        {
          if (sender != NULL &&
              !_dbus_header_delete_field (&message->header,
                                          DBUS_HEADER_FIELD_SENDER))
            return FALSE;
          member->prepared_direct = TRUE;
          member->prepared_fence = TRUE;
        }
      else if ((sender == NULL || strcmp (sender, member->name) != 0) &&
               !_dbus_header_set_field_basic (&message->header,
                                              DBUS_HEADER_FIELD_SENDER,
                                              DBUS_TYPE_STRING, &name))
        return FALSE;

      if (dbus_message_get_type (message) == DBUS_MESSAGE_TYPE_METHOD_CALL)
        {
          dbus_bool_t no_reply = dbus_message_get_no_reply (message);

          /* A match call without reply (dbus_bus_add_match() without
           * error) is applied now: the daemon handles it before anything
           * we send later, and only answers if it refuses. */
          if ((!no_reply ||
               is_driver_call (message, "AddMatch") ||
               is_driver_call (message, "RemoveMatch")) &&
              (call = track_call (member, message)) == NULL)
            return FALSE;

          if (no_reply && call != NULL && call->rule != NULL)
            apply_rule (member, call);
          member->prepared_by_name = call != NULL &&
              call->destination != NULL && !answered_by_destination (call);
        }

      if (!_dbus_mcast_group_can_carry (message))
        {
          member->prepared_direct = TRUE;
          member->prepared_fence = TRUE;
        }

      /* What a call to the bus driver changes (a match rule, a name)
       * takes effect before anything we send after it, as on a stock
       * bus: the daemon fences such a call too (_dbus_mcast_is_fenced()) */
      if (_dbus_mcast_is_fenced (message))
        member->prepared_fence = TRUE;

      /* Monitors that come later see its NoReply error if its callee
       * leaves (dbus-mcast-calls.h); one we cannot list passes the
       * daemon */
      if (call != NULL && call->counted && !member->prepared_direct &&
          !list_call (member, call, serial))
        {
          member->prepared_direct = TRUE;
          member->prepared_fence = TRUE;
        }
      list_reply (member, message);
      break;

    case STATE_HELLO_SENT:
      /* The Hello fence lets nothing through until the reply */
      _dbus_assert_not_reached ("wrote past the Hello fence");
      break;

    case STATE_NOT_PROMOTED:
    default:
      break;
    }

  member->prepared_serial = serial;
  return TRUE;
}

/**
 * Whether every packet of the prepared message goes to the daemon alone
 * (SCM_UNIX_DIRECT).
 *
 * @param member the state
 * @returns #TRUE for a message the group must not see
 */
dbus_bool_t
_dbus_mcast_member_is_direct (DBusMcastMember *member)
{
  return member->prepared_direct;
}

/**
 * Called for every packet the kernel took, as it counts them
 * (UNIX_GROUP_SENDS): the table's entries say by which count each call
 * or reply is sent.
 *
 * @param member the state
 */
void
_dbus_mcast_member_wrote (DBusMcastMember *member)
{
  _dbus_mcast_calls_sent (member->calls);
}

/**
 * Called when the last packet of the prepared message was written: puts
 * up the fence after Hello and after a message sent to the daemon alone,
 * and notes which member the kernel gave a call to a well-known name.
 *
 * @param member the state
 * @param fd the connection's socket
 */
void
_dbus_mcast_member_sent (DBusMcastMember *member,
                         DBusSocket       fd)
{
  PendingCall *call = NULL;

  /* Looked up again: a forged reply may have ended the call meanwhile */
  if (member->prepared_by_name)
    call = _dbus_hash_table_lookup_uintptr (member->pending,
                                            member->prepared_serial);
  if (call != NULL)
    {
      /* The kernel also keeps a message from the group that its egress
       * filter turns to the daemon */
      DBusSeqpacketSent sent = member->prepared_direct ?
          DBUS_SEQPACKET_SENT_TO_DAEMON :
          _dbus_seqpacket_get_sent_to (fd, &call->callee_id);

      call->routed = sent == DBUS_SEQPACKET_SENT_TO_DAEMON;
      if (call->slot >= 0 && !call->routed && call->callee_id != 0)
        _dbus_mcast_calls_set_callee (member->calls, call->slot,
                                      call->callee_id);
      else if (call->slot >= 0)
        {
          /* The daemon has it, or nobody does */
          _dbus_mcast_calls_remove (member->calls, call->slot);
          call->slot = -1;
        }
    }

  if (member->prepared_fence)
    {
      member->fenced = TRUE;
      member->fence_serial = member->state == STATE_HELLO_SENT ? 0 :
                             member->prepared_serial;
      _dbus_verbose ("dbus-mcast: fence up after serial %u\n",
                     member->prepared_serial);
    }

  /* The next message is a new one even if its serial is the same (an
   * application may set serials itself) */
  member->prepared_serial = 0;
}

/* Our Hello was answered.  A method return makes us a member: the body is
 * our unique name. */
static DBusMcastVerdict
hello_answered (DBusMcastMember  *member,
                int               type,
                const DBusString *message,
                int               byte_order,
                int               body_start)
{
  const char *signature = NULL;
  const char *name;
  DBusString name_str;

  member->fenced = FALSE;

  if (type != DBUS_MESSAGE_TYPE_METHOD_RETURN ||
      !_dbus_header_get_field_basic (&member->scratch,
                                     DBUS_HEADER_FIELD_SIGNATURE,
                                     DBUS_TYPE_SIGNATURE, &signature) ||
      strcmp (signature, "s") != 0)
    {
      _dbus_verbose ("dbus-mcast: Hello failed, not a member\n");
      member->state = STATE_NOT_PROMOTED;
      return DBUS_MCAST_KEEP;
    }

  _dbus_marshal_read_basic (message, body_start, DBUS_TYPE_STRING, &name,
                            byte_order, NULL);
  _dbus_string_init_const (&name_str, name);
  if (name[0] != ':' ||
      !_dbus_validate_bus_name (&name_str, 0, _dbus_string_get_length (&name_str)))
    {
      _dbus_verbose ("dbus-mcast: Hello returned no unique name, not a member\n");
      member->state = STATE_NOT_PROMOTED;
      return DBUS_MCAST_KEEP;
    }

  /* valid bus names are at most DBUS_MAXIMUM_NAME_LENGTH bytes */
  strcpy (member->name, name);
  member->state = STATE_MEMBER;
  _dbus_verbose ("dbus-mcast: member as %s\n", member->name);
  return DBUS_MCAST_KEEP;
}

/* Whether @call can only be answered by the member that departed as
 * @departed, its unique name: the call went to that name, or the kernel
 * gave a call to a well-known name to that member.  The daemon answers
 * the calls it routed itself, as stock does. */
static dbus_bool_t
departed_was_callee (const PendingCall *call,
                     const char        *departed)
{
  if (answered_by_destination (call))
    return strcmp (call->destination, departed) == 0;
  return call->callee_id != 0 &&
         call->callee_id == _dbus_mcast_sender_id_of_name (departed);
}

/* A call the Departed signal ends: which departure, and its serial */
typedef struct
{
  int departure;
  dbus_uint32_t serial;
} Ended;

/* In the signal's order of departures, and newest call first within
 * one: the order in which stock dbus-daemon sends the NoReply errors of
 * its departures (it prepends each call it expects a reply to onto the
 * list it walks then) */
static int
stock_order (const void *a,
             const void *b)
{
  const Ended *x = a;
  const Ended *y = b;

  if (x->departure != y->departure)
    return x->departure < y->departure ? -1 : 1;
  return x->serial > y->serial ? -1 : x->serial < y->serial;
}

/**
 * The error stock dbus-daemon sends @destination when the recipient of its
 * call @reply_serial disconnected without replying (bus/connection.c),
 * without a serial: the caller's libdbus makes it in the Departed
 * signal's place, and dbus-daemon shows it to its monitors.
 *
 * @param destination the caller's unique name
 * @param reply_serial the call's serial
 * @returns the error, or #NULL if no memory
 */
DBusMessage *
_dbus_mcast_no_reply_new (const char    *destination,
                          dbus_uint32_t  reply_serial)
{
  const char *text = DBUS_MCAST_NO_REPLY_TEXT;
  DBusMessage *error;

  error = dbus_message_new (DBUS_MESSAGE_TYPE_ERROR);
  if (error == NULL)
    return NULL;

  dbus_message_set_no_reply (error, TRUE);
  if (dbus_message_set_reply_serial (error, reply_serial) &&
      dbus_message_set_error_name (error, DBUS_ERROR_NO_REPLY) &&
      dbus_message_set_sender (error, DBUS_SERVICE_DBUS) &&
      dbus_message_set_destination (error, destination) &&
      dbus_message_append_args (error, DBUS_TYPE_STRING, &text,
                                DBUS_TYPE_INVALID))
    return error;

  dbus_message_unref (error);
  return NULL;
}

/**
 * A private signal of dbus-daemon's (DBUS_MCAST_INTERFACE) named @member,
 * from DBUS_SERVICE_DBUS on DBUS_PATH_DBUS, without arguments, destination
 * or serial: what a member believes only from the daemon's end of its
 * connection.
 *
 * @param member DBUS_MCAST_DEPARTED, DBUS_MCAST_OWNERS, ...
 * @returns the signal, or #NULL if no memory
 */
DBusMessage *
_dbus_mcast_daemon_signal_new (const char *member)
{
  DBusMessage *signal;

  signal = dbus_message_new_signal (DBUS_PATH_DBUS, DBUS_MCAST_INTERFACE,
                                    member);
  if (signal == NULL)
    return NULL;

  if (dbus_message_set_sender (signal, DBUS_SERVICE_DBUS))
    return signal;

  dbus_message_unref (signal);
  return NULL;
}

/**
 * The Departed signal dbus-daemon sends a member when the members
 * @names left (in that order), without destination or serial.
 *
 * @param names their unique names
 * @param n_names how many
 * @returns the signal, or #NULL if no memory
 */
DBusMessage *
_dbus_mcast_departed_new (const char **names,
                          int          n_names)
{
  DBusMessage *signal;

  signal = _dbus_mcast_daemon_signal_new (DBUS_MCAST_DEPARTED);
  if (signal == NULL)
    return NULL;

  if (dbus_message_append_args (signal, DBUS_TYPE_ARRAY, DBUS_TYPE_STRING,
                                &names, n_names, DBUS_TYPE_INVALID))
    return signal;

  dbus_message_unref (signal);
  return NULL;
}

/* Appends to @out the error stock dbus-daemon sends when the recipient of
 * our call @reply_serial disconnects without replying, numbered @serial:
 * the daemon's connection numbered the Departed signal with the first
 * serial of a block it numbers nothing else with, one for the signal and
 * one for each call we may await (the reply limit), so the errors take
 * the serials after it, as stock numbers each error it sends. */
static dbus_bool_t
append_no_reply (DBusMcastMember *member,
                 DBusString      *out,
                 dbus_uint32_t    serial,
                 dbus_uint32_t    reply_serial)
{
  const DBusString *header, *body;
  DBusMessage *error;
  dbus_bool_t ok;

  error = _dbus_mcast_no_reply_new (member->name, reply_serial);
  if (error == NULL)
    return FALSE;

  dbus_message_set_serial (error, serial);
  dbus_message_lock (error);
  _dbus_message_get_network_data (error, &header, &body);
  ok = _dbus_string_copy (header, 0, out, _dbus_string_get_length (out)) &&
       _dbus_string_copy (body, 0, out, _dbus_string_get_length (out));
  dbus_message_unref (error);
  return ok;
}

/* Loads the daemon's private signal @member (DBUS_MCAST_DEPARTED or
 * DBUS_MCAST_OWNERS), at @start in @data, @len bytes, into @signal if it
 * has @signature: #DBUS_MCAST_KEEP; #DBUS_MCAST_DROP, logged, if it does
 * not load; #DBUS_MCAST_NO_MEMORY. */
static DBusMcastVerdict
load_daemon_signal (DBusString   *data,
                    int           start,
                    int           len,
                    const char   *member,
                    const char   *signature,
                    DBusMessage **signal)
{
  DBusError error = DBUS_ERROR_INIT;

  *signal = dbus_message_demarshal (_dbus_string_get_const_data_len (data, start, len),
                                    len, &error);
  if (*signal != NULL && dbus_message_has_signature (*signal, signature))
    return DBUS_MCAST_KEEP;

  if (*signal == NULL && dbus_error_has_name (&error, DBUS_ERROR_NO_MEMORY))
    {
      dbus_error_free (&error);
      return DBUS_MCAST_NO_MEMORY;
    }

  _dbus_verbose ("dbus-mcast: cannot read a %s signal (%s)\n", member,
                 *signal == NULL ? error.message : "signature");
  dbus_error_free (&error);
  if (*signal != NULL)
    dbus_message_unref (*signal);
  *signal = NULL;
  return DBUS_MCAST_DROP;
}

/* The daemon's Departed signal, at @start in @data, @len bytes: replaced
 * there by stock's NoReply error for each call of ours the departed
 * members will never answer.  Without memory nothing changes
 * (#DBUS_MCAST_NO_MEMORY: the caller tries again later). */
static DBusMcastVerdict
member_departed (DBusMcastMember *member,
                 DBusString      *data,
                 int              start,
                 int              len)
{
  DBusMessage *signal;
  DBusMessageIter args, entries;
  Ended *ended = NULL;
  DBusString errors;
  DBusHashIter iter;
  DBusMcastVerdict verdict;
  int n = 0, i;

  verdict = load_daemon_signal (data, start, len, DBUS_MCAST_DEPARTED,
                                DBUS_MCAST_DEPARTED_SIGNATURE, &signal);
  if (verdict != DBUS_MCAST_KEEP)
    return verdict;

  verdict = DBUS_MCAST_NO_MEMORY;
  ended = dbus_new (Ended, _dbus_hash_table_get_n_entries (member->pending) + 1);
  if (ended == NULL)
    goto out;

  dbus_message_iter_init (signal, &args);
  _dbus_hash_iter_init (member->pending, &iter);
  while (_dbus_hash_iter_next (&iter))
    {
      int departure = 0;

      dbus_message_iter_recurse (&args, &entries);
      while (dbus_message_iter_get_arg_type (&entries) == DBUS_TYPE_STRING)
        {
          const char *departed;

          dbus_message_iter_get_basic (&entries, &departed);
          if (departed_was_callee (_dbus_hash_iter_get_value (&iter), departed))
            {
              ended[n].departure = departure;
              ended[n++].serial = _dbus_hash_iter_get_uintptr_key (&iter);
              break;
            }
          dbus_message_iter_next (&entries);
          departure++;
        }
    }
  qsort (ended, n, sizeof (Ended), stock_order);

  if (!_dbus_string_init (&errors))
    goto out;

  for (i = 0; i < n; i++)
    {
      if (!append_no_reply (member, &errors,
                            dbus_message_get_serial (signal) + 1 + i,
                            ended[i].serial))
        goto out_errors;
    }

  if (!_dbus_string_replace_len (&errors, 0, _dbus_string_get_length (&errors),
                                 data, start, len))
    goto out_errors;

  _dbus_verbose ("dbus-mcast: members departed, %d calls end with NoReply\n", n);
  for (i = 0; i < n; i++)
    forget_call (member, ended[i].serial);
  verdict = DBUS_MCAST_KEEP;

 out_errors:
  _dbus_string_free (&errors);
 out:
  if (verdict != DBUS_MCAST_KEEP)
    _dbus_verbose ("dbus-mcast: no memory for the NoReply errors of a departure\n");
  dbus_free (ended);
  dbus_message_unref (signal);
  return verdict;
}

/**
 * Sets @name's entry in a table of owners as an Owners signal entry
 * (@name, @owner) does: the member keeps its table so, and the daemon
 * keeps what it told each member the same way.  An empty @owner (none)
 * removes the entry.
 *
 * @param owners well-known name -> unique name, both owned by the table
 * @param name the name
 * @param owner its owner's unique name, or ""
 * @returns #FALSE if no memory (the entry is then as it was)
 */
dbus_bool_t
_dbus_mcast_owners_record (DBusHashTable *owners,
                           const char    *name,
                           const char    *owner)
{
  char *key, *value;

  if (*owner == '\0')
    {
      _dbus_hash_table_remove_string (owners, name);
      return TRUE;
    }

  key = _dbus_strdup (name);
  value = _dbus_strdup (owner);
  if (key == NULL || value == NULL ||
      !_dbus_hash_table_insert_string (owners, key, value))
    {
      dbus_free (key);
      dbus_free (value);
      return FALSE;
    }

  return TRUE;
}

/* Records one (name, owner) entry of the daemon's Owners signal.  FALSE
 * if no memory. */
static dbus_bool_t
record_owner (DBusMcastMember *member,
              DBusMessageIter *entry)
{
  DBusMessageIter fields;
  const char *name, *owner;

  dbus_message_iter_recurse (entry, &fields);
  dbus_message_iter_get_basic (&fields, &name);
  dbus_message_iter_next (&fields);
  dbus_message_iter_get_basic (&fields, &owner);
  return _dbus_mcast_owners_record (member->owners, name, owner);
}

/* The daemon's Owners signal, at @start in @data, @len bytes: the new
 * owners of the well-known names our rules' sender= keys name.  Consumed.
 * Without memory it is read again later (#DBUS_MCAST_NO_MEMORY; entries
 * recorded meanwhile are recorded again, and no group packet is checked
 * in between).  One that does not load makes every owner forgotten, so
 * that no sender= key naming a well-known name matches until the next
 * Owners signal: a broadcast is lost rather than one from a former owner
 * accepted. */
static DBusMcastVerdict
member_owners (DBusMcastMember *member,
               DBusString      *data,
               int              start,
               int              len)
{
  DBusMessage *signal;
  DBusMessageIter args, entries;
  DBusMcastVerdict verdict;

  verdict = load_daemon_signal (data, start, len, DBUS_MCAST_OWNERS,
                                DBUS_MCAST_OWNERS_SIGNATURE, &signal);
  if (verdict == DBUS_MCAST_NO_MEMORY)
    return verdict;

  if (verdict == DBUS_MCAST_DROP)
    {
      _dbus_verbose ("dbus-mcast: owners of sender= names forgotten\n");
      _dbus_hash_table_remove_all (member->owners);
      return DBUS_MCAST_DROP;
    }

  dbus_message_iter_init (signal, &args);
  dbus_message_iter_recurse (&args, &entries);
  verdict = DBUS_MCAST_DROP;
  while (dbus_message_iter_get_arg_type (&entries) == DBUS_TYPE_STRUCT)
    {
      if (!record_owner (member, &entries))
        {
          verdict = DBUS_MCAST_NO_MEMORY;
          break;
        }
      dbus_message_iter_next (&entries);
    }

  dbus_message_unref (signal);
  return verdict;
}

/* Whether @header, of a message of @type from @sender, is the daemon's
 * NoReply error */
static dbus_bool_t
is_no_reply (DBusHeader *header,
             int         type,
             const char *sender)
{
  const char *name = NULL;

  return type == DBUS_MESSAGE_TYPE_ERROR &&
         sender != NULL && strcmp (sender, DBUS_SERVICE_DBUS) == 0 &&
         _dbus_header_get_field_basic (header, DBUS_HEADER_FIELD_ERROR_NAME,
                                       DBUS_TYPE_STRING, &name) &&
         strcmp (name, DBUS_ERROR_NO_REPLY) == 0;
}

/* The argument of a daemon signal whose body is one u, loaded in
 * member->scratch from @message.  FALSE if it has another body. */
static dbus_bool_t
get_uint32_argument (DBusMcastMember  *member,
                     const DBusString *message,
                     int               byte_order,
                     int               header_len,
                     int               body_len,
                     dbus_uint32_t    *argument)
{
  const char *signature = NULL;

  if (!_dbus_header_get_field_basic (&member->scratch, DBUS_HEADER_FIELD_SIGNATURE,
                                     DBUS_TYPE_SIGNATURE, &signature) ||
      strcmp (signature, DBUS_TYPE_UINT32_AS_STRING) != 0 || body_len != 4)
    return FALSE;

  *argument = _dbus_unpack_uint32 (byte_order,
                                   (const unsigned char *)
                                   _dbus_string_get_const_data_len (message,
                                                                    header_len, 4));
  return TRUE;
}

/* Whether @interface.@member, sent by the bus driver, is the daemon's
 * private signal @name */
static dbus_bool_t
is_daemon_signal (const char *interface,
                  const char *method,
                  const char *name)
{
  return interface != NULL && strcmp (interface, DBUS_MCAST_INTERFACE) == 0 &&
         method != NULL && strcmp (method, name) == 0;
}

/* The daemon's Calls signal: the table to list our calls to members in.
 * Its fd is the only one in @fds, those of the packet it came in (#NULL
 * for a message not read whole from one packet, which the daemon never
 * makes of it); they are closed and taken from @fds either way. */
static void
take_calls (DBusMcastMember *member,
            int             *fds,
            unsigned int    *n_fds)
{
  unsigned int i;

  if (fds == NULL)
    return;

  if (*n_fds == 1 && member->state != STATE_NOT_PROMOTED &&
      !_dbus_mcast_calls_attach (member->calls, fds[0]))
    _dbus_verbose ("dbus-mcast: cannot map the table of calls, calls to members pass the daemon\n");

  for (i = 0; i < *n_fds; i++)
    _dbus_close (fds[i], NULL);
  *n_fds = 0;
}

/**
 * Looks at a complete message from the daemon (sender id 0), which is
 * trusted: the Hello reply, the Routed fence signal (consumed), the
 * Departed signal (replaced in @data by the errors it stands for), the
 * Owners and ReplyLimit signals (consumed), replies.  A message that
 * does not parse is kept: the message loader then disconnects, as it
 * would from any daemon sending garbage.
 *
 * @param member the state
 * @param data the buffer holding the message
 * @param start where it starts
 * @param len its length
 * @param fds the unix fds of the packet it came in, or #NULL if it was
 *   not read whole from one packet
 * @param n_fds how many; fds the member takes are taken from @fds
 * @returns what to do with it (with #DBUS_MCAST_KEEP, what is at @start
 *   in @data now; with #DBUS_MCAST_NO_MEMORY, as much as was done may be
 *   done again: call again for the same message)
 */
DBusMcastVerdict
_dbus_mcast_member_from_daemon (DBusMcastMember  *member,
                                DBusString       *data,
                                int               start,
                                int               len,
                                int              *fds,
                                unsigned int     *n_fds)
{
  DBusString message;
  DBusValidity validity;
  int byte_order, fields_array_len, header_len, body_len;
  int type;
  const char *sender = NULL;
  const char *interface = NULL;
  const char *method = NULL;
  dbus_uint32_t reply_serial, argument;

  _dbus_string_init_const_len (&message,
                               _dbus_string_get_const_data_len (data, start, len),
                               len);

  if (!_dbus_header_have_message_untrusted (DBUS_MAXIMUM_MESSAGE_LENGTH,
                                            &validity, &byte_order,
                                            &fields_array_len, &header_len,
                                            &body_len, &message, 0, len) ||
      header_len + body_len != len)
    return DBUS_MCAST_KEEP;

  _dbus_header_reinit (&member->scratch);
  if (!_dbus_header_load (&member->scratch, DBUS_VALIDATION_MODE_DATA_IS_UNTRUSTED,
                          &validity, byte_order, fields_array_len, header_len,
                          body_len, &message))
    return validity == DBUS_VALIDITY_UNKNOWN_OOM_ERROR ?
           DBUS_MCAST_NO_MEMORY : DBUS_MCAST_KEEP;

  type = _dbus_header_get_message_type (&member->scratch);
  _dbus_header_get_field_basic (&member->scratch, DBUS_HEADER_FIELD_SENDER,
                                DBUS_TYPE_STRING, &sender);

  if (type == DBUS_MESSAGE_TYPE_SIGNAL &&
      sender != NULL && strcmp (sender, DBUS_SERVICE_DBUS) == 0)
    {
      _dbus_header_get_field_basic (&member->scratch, DBUS_HEADER_FIELD_INTERFACE,
                                    DBUS_TYPE_STRING, &interface);
      _dbus_header_get_field_basic (&member->scratch, DBUS_HEADER_FIELD_MEMBER,
                                    DBUS_TYPE_STRING, &method);
    }

  if (is_daemon_signal (interface, method, DBUS_MCAST_DEPARTED))
    return member->state == STATE_MEMBER ?
           member_departed (member, data, start, len) : DBUS_MCAST_DROP;

  if (is_daemon_signal (interface, method, DBUS_MCAST_OWNERS))
    return member->state == STATE_MEMBER ?
           member_owners (member, data, start, len) : DBUS_MCAST_DROP;

  if (is_daemon_signal (interface, method, DBUS_MCAST_ROUTED))
    {
      /* The fence signal: consumed, never dispatched */
      if (get_uint32_argument (member, &message, byte_order, header_len,
                               body_len, &argument) &&
          member->fenced && member->state == STATE_MEMBER &&
          argument == member->fence_serial)
        {
          _dbus_verbose ("dbus-mcast: fence down after serial %u\n",
                         member->fence_serial);
          member->fenced = FALSE;
        }
      return DBUS_MCAST_DROP;
    }

  if (is_daemon_signal (interface, method, DBUS_MCAST_CALLS))
    {
      take_calls (member, fds, n_fds);
      return DBUS_MCAST_DROP;
    }

  if (is_daemon_signal (interface, method, DBUS_MCAST_REPLY_LIMIT))
    {
      /* Read without allocating: a limit cannot be lost */
      if (get_uint32_argument (member, &message, byte_order, header_len,
                               body_len, &argument) &&
          member->state != STATE_NOT_PROMOTED)
        {
          _dbus_verbose ("dbus-mcast: at most %u calls awaiting replies\n",
                         argument);
          member->reply_limit = argument;
        }
      return DBUS_MCAST_DROP;
    }

  if ((type == DBUS_MESSAGE_TYPE_METHOD_RETURN || type == DBUS_MESSAGE_TYPE_ERROR) &&
      _dbus_header_get_field_basic (&member->scratch, DBUS_HEADER_FIELD_REPLY_SERIAL,
                                    DBUS_TYPE_UINT32, &reply_serial))
    {
      if (member->state == STATE_HELLO_SENT && reply_serial == member->hello_serial)
        return hello_answered (member, type, &message, byte_order, header_len);

      /* The daemon also answers NoReply for the calls between members
       * it routed; the Departed signal may have answered them first. */
      if (member->state == STATE_MEMBER &&
          !answer_call (member, reply_serial, sender, TRUE,
                        type == DBUS_MESSAGE_TYPE_METHOD_RETURN) &&
          is_no_reply (&member->scratch, type, sender))
        return DBUS_MCAST_DROP;
    }

  return DBUS_MCAST_KEEP;
}

static dbus_bool_t
matches_a_rule (DBusMcastMember *member,
                DBusMessage     *message)
{
  DBusList *link;

  for (link = _dbus_list_get_first_link (&member->rules);
       link != NULL;
       link = _dbus_list_get_next_link (&member->rules, link))
    {
      if (_dbus_match_rule_matches (link->data, message, member->name,
                                    member->owners))
        return TRUE;
    }

  return FALSE;
}

/* Parses the decimal number at *p, written as dbus-daemon writes it (no
 * sign, no leading zero), and moves *p past it. */
static dbus_bool_t
parse_name_number (const char    **p,
                   dbus_uint32_t  *value)
{
  const char *s = *p;
  dbus_uint64_t v = 0;

  if (*s < '0' || *s > '9' || (*s == '0' && s[1] >= '0' && s[1] <= '9'))
    return FALSE;

  for (; *s >= '0' && *s <= '9'; s++)
    {
      v = v * 10 + (dbus_uint64_t) (*s - '0');
      if (v > 0xffffffffu)
        return FALSE;
    }

  *value = (dbus_uint32_t) v;
  *p = s;
  return TRUE;
}

/**
 * Whether the group can carry a message as one packet: no fds, no longer
 * than a packet, in this machine's byte order, the only one peer filters
 * and members read.  A member sends anything else to the daemon alone,
 * which routes it as a stock daemon does; the daemon tells the two apart
 * with this same test.
 *
 * @param message the message
 * @returns #TRUE if it can go to the group
 */
dbus_bool_t
_dbus_mcast_group_can_carry (DBusMessage *message)
{
  const int *fds;
  unsigned int n_fds;

  _dbus_message_get_unix_fds (message, &fds, &n_fds);
  return n_fds == 0 && length_of (message) <= DBUS_SEQPACKET_FRAGMENT_SIZE &&
         _dbus_header_get_byte_order (&message->header) == DBUS_COMPILER_BYTE_ORDER;
}

/**
 * Whether a member's message, as the daemon reads it before it writes
 * SENDER, is a call the member's libdbus found over the bus's reply
 * limit: one that counts towards max_replies_per_connection and comes
 * without SENDER, which a member writes into everything else it sends
 * (_dbus_mcast_member_prepare()).  dbus-daemon refuses it as stock refuses
 * a call over the limit.
 *
 * @param message the message
 * @returns #TRUE for such a call
 */
dbus_bool_t
_dbus_mcast_is_over_reply_limit (DBusMessage *message)
{
  return counts_reply (message) && dbus_message_get_sender (message) == NULL;
}

/**
 * Whether a member's message that the group carries is fenced all the
 * same: a call to the bus driver that changes what the daemon routes
 * (match rules, names, monitoring).  The member writes nothing after it
 * until the daemon's Routed signal for it, which the daemon sends once it
 * has handled it; both decide with this test.  Other driver calls are not
 * fenced: the daemon keeps StartServiceByName until the service has
 * started, and the member must be able to write meanwhile.
 *
 * @param message the message
 * @returns #TRUE for such a call
 */
dbus_bool_t
_dbus_mcast_is_fenced (DBusMessage *message)
{
  static const char * const changes[] = {
    "AddMatch", "RemoveMatch", "RequestName", "ReleaseName"
  };
  int i;

  if (dbus_message_is_method_call (message, DBUS_INTERFACE_MONITORING,
                                   "BecomeMonitor"))
    return dbus_message_has_destination (message, DBUS_SERVICE_DBUS);

  for (i = 0; i < _DBUS_N_ELEMENTS (changes); i++)
    {
      if (is_driver_call (message, changes[i]))
        return TRUE;
    }

  return FALSE;
}

/**
 * The kernel sender id that belongs to a unique name: MAJOR << 32 | MINOR
 * for ":MAJOR.MINOR" as dbus-daemon writes it (decimal, no leading zero,
 * MAJOR not 0).  The daemon sets it on the member it admits, and a
 * member checks every group message's SENDER against it, so both must
 * read a name the same way.  Parsed rather than formatted: a member does
 * it for every group message, and snprintf() showed in its profile.
 *
 * @param name a bus name, or #NULL
 * @returns the id, or 0 (the daemon's own id) if name is not such a name
 */
dbus_uint64_t
_dbus_mcast_sender_id_of_name (const char *name)
{
  dbus_uint32_t major, minor;

  if (name == NULL || *name != ':')
    return 0;
  name++;

  if (!parse_name_number (&name, &major) || major == 0 || *name != '.')
    return 0;
  name++;

  if (!parse_name_number (&name, &minor) || *name != '\0')
    return 0;

  return ((dbus_uint64_t) major << 32) | minor;
}

/**
 * The unique name a kernel sender id stands for, ":MAJOR.MINOR" as
 * dbus-daemon writes it: the inverse of _dbus_mcast_sender_id_of_name().
 *
 * @param sender_id the id
 * @param name where to write it, #DBUS_MCAST_SENDER_NAME_SIZE bytes
 */
void
_dbus_mcast_name_of_sender_id (dbus_uint64_t  sender_id,
                               char          *name)
{
  snprintf (name, DBUS_MCAST_SENDER_NAME_SIZE, ":%u.%u",
            (unsigned int) (sender_id >> 32),
            (unsigned int) (sender_id & 0xffffffffu));
}

/* The checks of doc/design.md "What a member's libdbus checks", on a
 * valid message whose SENDER was verified. */
static dbus_bool_t
accept_from_peer (DBusMcastMember *member,
                  DBusMessage     *message)
{
  int type = dbus_message_get_type (message);
  dbus_bool_t is_reply = type == DBUS_MESSAGE_TYPE_METHOD_RETURN ||
                         type == DBUS_MESSAGE_TYPE_ERROR;
  const char *destination = dbus_message_get_destination (message);

  /* A monitor sees all the traffic, as on a stock bus */
  if (member->monitor)
    return TRUE;

  if (destination != NULL && strcmp (destination, member->name) == 0)
    {
      dbus_uint32_t reply_serial = dbus_message_get_reply_serial (message);

      /* For us.  A reply to a call we wait for only from whom we asked;
       * any other is unrequested, which the policy of a bus that
       * promotes lets through (bus_policy_can_be_filtered()), as stock
       * delivers it */
      if (is_reply &&
          _dbus_hash_table_lookup_uintptr (member->pending, reply_serial) != NULL)
        return answer_call (member, reply_serial,
                            dbus_message_get_sender (message), FALSE,
                            type == DBUS_MESSAGE_TYPE_METHOD_RETURN);
      return TRUE;
    }

  /* A well-known name: the peer filter holds the names we own */
  if (destination != NULL && !is_reply && destination[0] != ':' &&
      strcmp (destination, DBUS_SERVICE_DBUS) != 0)
    return TRUE;

  /* A broadcast, or unicast for someone else: only what our rules ask
   * for (eavesdropping rules for the latter) */
  return matches_a_rule (member, message);
}

/**
 * Loads the message a group packet from @sender_id must hold: exactly one
 * valid message, in host byte order (a member sends anything else to the
 * daemon alone).  Its SENDER is not checked.
 *
 * @param sender_id the kernel's id of the sender, for the log
 * @param data the buffer holding the packet
 * @param start where it starts
 * @param len its length
 * @param message where to return the message when the verdict is
 *   #DBUS_MCAST_KEEP (the caller owns it)
 * @returns #DBUS_MCAST_KEEP, #DBUS_MCAST_DROP or #DBUS_MCAST_NO_MEMORY
 */
DBusMcastVerdict
_dbus_mcast_load_packet (dbus_uint64_t      sender_id,
                         const DBusString  *data,
                         int                start,
                         int                len,
                         DBusMessage      **message)
{
  const char *packet = _dbus_string_get_const_data_len (data, start, len);
  DBusError error = DBUS_ERROR_INIT;

  if (len < 1 || packet[0] != DBUS_COMPILER_BYTE_ORDER ||
      dbus_message_demarshal_bytes_needed (packet, len) != len)
    {
      _dbus_verbose ("dbus-mcast: dropping a malformed packet from id %" DBUS_INT64_MODIFIER "x\n",
                     sender_id);
      return DBUS_MCAST_DROP;
    }

  *message = dbus_message_demarshal (packet, len, &error);
  if (*message == NULL)
    {
      dbus_bool_t oom = dbus_error_has_name (&error, DBUS_ERROR_NO_MEMORY);

      _dbus_verbose ("dbus-mcast: dropping an invalid message from id %" DBUS_INT64_MODIFIER "x: %s\n",
                     sender_id, error.message);
      dbus_error_free (&error);
      return oom ? DBUS_MCAST_NO_MEMORY : DBUS_MCAST_DROP;
    }

  return DBUS_MCAST_KEEP;
}

/**
 * Checks a packet from another member of the group (sender id not 0),
 * which is not trusted: exactly one valid message in host byte order,
 * SENDER the unique name of sender_id (":MAJOR.MINOR" for MAJOR << 32 |
 * MINOR), then accept_from_peer().
 *
 * @param member the state
 * @param sender_id the kernel's id of the sender
 * @param data the buffer holding the packet
 * @param start where it starts
 * @param len its length
 * @param checked if not #NULL, where to return the message loaded for
 *   the check when it is kept (the caller owns it), so that it need not
 *   be loaded again
 * @returns what to do with it
 */
DBusMcastVerdict
_dbus_mcast_member_from_peer (DBusMcastMember  *member,
                              dbus_uint64_t     sender_id,
                              const DBusString *data,
                              int               start,
                              int               len,
                              DBusMessage     **checked)
{
  DBusMcastVerdict verdict;
  DBusMessage *message;
  const char *sender;
  dbus_bool_t accepted;

  if (member->state == STATE_HELLO_SENT)
    return DBUS_MCAST_DEFER; /* admitted, but we do not know our name yet */

  if (member->state != STATE_MEMBER)
    {
      _dbus_verbose ("dbus-mcast: dropping a group packet, not a member\n");
      return DBUS_MCAST_DROP;
    }

  verdict = _dbus_mcast_load_packet (sender_id, data, start, len, &message);
  if (verdict != DBUS_MCAST_KEEP)
    return verdict;

  sender = dbus_message_get_sender (message);

  if (_dbus_mcast_sender_id_of_name (sender) != sender_id)
    {
      _dbus_verbose ("dbus-mcast: dropping a message from :%u.%u claiming to be from %s\n",
                     (unsigned int) (sender_id >> 32),
                     (unsigned int) (sender_id & 0xffffffffu),
                     sender != NULL ? sender : "(nobody)");
      accepted = FALSE;
    }
  else
    {
      accepted = accept_from_peer (member, message);
      if (!accepted)
        _dbus_verbose ("dbus-mcast: dropping an unsolicited message from %s\n",
                       sender);
    }

  if (accepted && checked != NULL)
    {
      *checked = message;
      return DBUS_MCAST_KEEP;
    }

  dbus_message_unref (message);
  return accepted ? DBUS_MCAST_KEEP : DBUS_MCAST_DROP;
}
