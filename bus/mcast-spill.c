/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-spill.c  The copies the kernel diverted from a full member
 *
 * See mcast-spill.h for what this module is for.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "mcast-spill.h"

#include <errno.h>
#include <dbus/dbus-list.h>
#include <dbus/dbus-mcast-member.h>
#include <dbus/dbus-mcast-uapi.h>
#include <dbus/dbus-seqpacket-io.h>
#include <dbus/dbus-timeout.h>
#include "connection.h"
#include "mcast-members.h"
#include "services.h"
#include "utils.h"

/* What the daemon holds for one member, in a connection data slot, and
 * referenced by each of its copies until that copy is written */
typedef struct
{
  int refcount;
  BusMcastSpill *spill;
  DBusConnection *connection;  /**< not referenced; NULL once finalized */
  int outstanding;             /**< copies queued at the member, or parked */
  dbus_uint32_t last_seq;      /**< of the last copy read */
  dbus_bool_t due;             /**< on spill->due */
  DBusList *parked;            /**< Held *, waiting for their seq */
} Member;

/* A copy of a message the daemon routed to a member, held ahead of the
 * group copies the member gets after it (bus_mcast_spill_hold()), in
 * hold_slot of the copy.  Diverted copies up to @after were sent before
 * it: if the daemon has not read them all yet, the copy is parked until
 * it has. */
typedef struct
{
  Member *member;              /**< referenced */
  dbus_uint32_t after;
  DBusList *link;              /**< preallocated for member->parked */
  DBusMessage *copy;           /**< referenced while parked */
  DBusPreallocatedSend *preallocated;  /**< while parked */
} Held;

struct BusMcastSpill
{
  BusContext *context;
  DBusTimeout *resume;         /**< enabled while members are due */
  DBusList *due;               /**< Member *, referenced */
  BusMcastSpillStats stats;
};

static dbus_int32_t member_slot = -1;
static dbus_int32_t copy_slot = -1;
static dbus_int32_t hold_slot = -1;

/* Whether the daemon has read the diverted copy numbered @seq, when it
 * has read up to @last; sequence numbers wrap */
static dbus_bool_t
seq_reached (dbus_uint32_t last,
             dbus_uint32_t seq)
{
  return (dbus_int32_t) (last - seq) >= 0;
}

static Member *
member_ref (Member *member)
{
  member->refcount += 1;
  return member;
}

static void
member_unref (void *data)
{
  Member *member = data;

  member->refcount -= 1;
  if (member->refcount == 0)
    dbus_free (member);
}

/* The free function of member_slot: the connection is being finalized */
static void
member_gone (void *data)
{
  Member *member = data;

  member->connection = NULL;
  member_unref (member);
}

/* The member's state, created at its first diverted copy; NULL if no
 * memory */
static Member *
member_of (BusMcastSpill  *spill,
           DBusConnection *connection)
{
  Member *member = dbus_connection_get_data (connection, member_slot);

  if (member != NULL)
    return member;

  member = dbus_new0 (Member, 1);
  if (member == NULL)
    return NULL;

  member->refcount = 1;
  member->spill = spill;
  member->connection = connection;
  if (!dbus_connection_set_data (connection, member_slot, member,
                                 member_gone))
    {
      dbus_free (member);
      return NULL;
    }

  return member;
}

/* Nothing the daemon read for the member is left to write: let the
 * kernel deliver to it directly again, from the main loop */
static void
member_settled (Member *member)
{
  BusMcastSpill *spill = member->spill;

  if (member->outstanding > 0 || member->due)
    return;

  if (!_dbus_list_append (&spill->due, member))
    {
      /* No memory: the member stays diverted until its next copy, which
       * is slower for it, but loses and reorders nothing */
      _dbus_verbose ("dbus-mcast: no memory to resume a member\n");
      return;
    }

  member_ref (member);
  member->due = TRUE;
  _dbus_timeout_restart (spill->resume, 0);
}

/* The free function of copy_slot: the member's copy was written, or
 * dropped with the member */
static void
copy_written (void *data)
{
  Member *member = data;

  member->outstanding -= 1;
  member_settled (member);
  member_unref (member);
}

/* The free function of hold_slot: the held copy was written, or dropped
 * with the member */
static void
held_written (void *data)
{
  Held *held = data;
  Member *member = held->member;

  _dbus_assert (held->copy == NULL);
  _dbus_assert (held->preallocated == NULL);

  if (held->link != NULL)
    _dbus_list_free_link (held->link);
  dbus_free (held);
  copy_written (member);
}

#ifdef DBUS_HAVE_MCAST_UAPI
/* @held, with its member and its seq set, keeps @copy behind the
 * diverted copies up to that seq and the member diverted until @copy is
 * written (held_written()).  Cannot fail. */
static void
attach_held (Held        *held,
             DBusMessage *copy)
{
  member_ref (held->member);
  held->member->outstanding += 1;
  while (!dbus_message_set_data (copy, hold_slot, held, held_written))
    _dbus_wait_for_memory ();
}
#endif

/* Sends the parked copies whose preceding diverted copies are all
 * queued now */
/* Takes the first parked copy of @member off its list: sends it with its
 * preallocated send if @send, else frees that send */
static void
unpark (Member      *member,
        dbus_bool_t  send)
{
  DBusList *link = _dbus_list_get_first_link (&member->parked);
  Held *held = link->data;
  DBusMessage *copy = held->copy;

  _dbus_list_unlink (&member->parked, link);
  held->link = link;
  held->copy = NULL;
  if (send)
    dbus_connection_send_preallocated (member->connection,
                                       held->preallocated, copy, NULL);
  else
    dbus_connection_free_preallocated_send (member->connection,
                                            held->preallocated);
  held->preallocated = NULL;
  /* may free held */
  dbus_message_unref (copy);
}

static void
send_parked (Member *member)
{
  while (member->parked != NULL &&
         seq_reached (member->last_seq,
                      ((Held *) member->parked->data)->after))
    unpark (member, TRUE);
}

#ifdef DBUS_HAVE_MCAST_UAPI
static void
resume (BusMcastSpill *spill,
        Member        *member)
{
  int fd;

  if (member->connection == NULL ||
      !dbus_connection_get_is_connected (member->connection) ||
      !dbus_connection_get_socket (member->connection, &fd))
    return;

  if (setsockopt (fd, SOL_UNIX, UNIX_PEER_RESUME, &member->last_seq,
                  sizeof (member->last_seq)) == 0)
    spill->stats.resumes += 1;
  else if (errno != EAGAIN)
    _dbus_verbose ("dbus-mcast: cannot resume %s: %s\n",
                   bus_connection_get_name (member->connection),
                   _dbus_strerror (errno));
  /* EAGAIN: newer copies wait on the socket; this runs again once they
   * are written */
}
#endif

static dbus_bool_t
resume_due (void *data)
{
  BusMcastSpill *spill = data;
  Member *member;

  while ((member = _dbus_list_pop_first (&spill->due)) != NULL)
    {
      member->due = FALSE;
#ifdef DBUS_HAVE_MCAST_UAPI
      if (member->outstanding == 0)
        resume (spill, member);
#endif
      member_unref (member);
    }

  _dbus_timeout_disable (spill->resume);
  return TRUE;
}

BusMcastSpill *
bus_mcast_spill_new (BusContext *context)
{
  BusMcastSpill *spill;

  spill = dbus_new0 (BusMcastSpill, 1);
  if (spill == NULL)
    return NULL;

  spill->context = context;
  spill->resume = _dbus_timeout_new (0, resume_due, spill, NULL);
  if (spill->resume == NULL)
    goto failed;

  _dbus_timeout_disable (spill->resume);
  if (!_dbus_loop_add_timeout (bus_context_get_loop (context), spill->resume))
    goto failed;

  if (!dbus_connection_allocate_data_slot (&member_slot))
    goto failed_loop;

  if (!dbus_message_allocate_data_slot (&copy_slot))
    goto failed_member_slot;

  if (!dbus_message_allocate_data_slot (&hold_slot))
    goto failed_copy_slot;

  if (!_dbus_seqpacket_marks_init ())
    goto failed_hold_slot;

  return spill;

 failed_hold_slot:
  dbus_message_free_data_slot (&hold_slot);
 failed_copy_slot:
  dbus_message_free_data_slot (&copy_slot);
 failed_member_slot:
  dbus_connection_free_data_slot (&member_slot);
 failed_loop:
  _dbus_loop_remove_timeout (bus_context_get_loop (context), spill->resume);
 failed:
  if (spill->resume != NULL)
    _dbus_timeout_unref (spill->resume);
  dbus_free (spill);
  return NULL;
}

void
bus_mcast_spill_free (BusMcastSpill *spill)
{
  if (spill == NULL)
    return;

  _dbus_list_clear_full (&spill->due, member_unref);
  _dbus_loop_remove_timeout (bus_context_get_loop (spill->context),
                             spill->resume);
  _dbus_timeout_unref (spill->resume);
  _dbus_seqpacket_marks_deinit ();
  dbus_message_free_data_slot (&hold_slot);
  dbus_message_free_data_slot (&copy_slot);
  dbus_connection_free_data_slot (&member_slot);
  dbus_free (spill);
}

/* The connection of the member that sent a diverted copy, if its SENDER
 * is the name the kernel's id stands for and it is still connected; a copy
 * whose SENDER lies is one the member's libdbus would drop */
static DBusConnection *
sender_of (BusMcastSpill               *spill,
           DBusMessage                 *message,
           const DBusSeqpacketDiverted *diverted)
{
  const char *name = dbus_message_get_sender (message);

  if (name == NULL || _dbus_mcast_sender_id_of_name (name) != diverted->sender_id)
    return NULL;

  return bus_mcast_owner_of (bus_context_get_registry (spill->context), name);
}

/* Whether @member is the connection @message is addressed to */
static dbus_bool_t
addressed_to (BusMcastSpill  *spill,
              DBusConnection *member,
              DBusMessage    *message)
{
  const char *destination = dbus_message_get_destination (message);

  return destination != NULL &&
         bus_mcast_owner_of (bus_context_get_registry (spill->context),
                             destination) == member;
}

/* Refuses a copy the member has no room for, as stock refuses a message
 * for a recipient with a full queue: the log line, and to a caller that
 * waits for the member's reply, the LimitsExceeded error */
static void
refuse (BusMcastSpill  *spill,
        DBusConnection *sender,
        DBusConnection *member,
        DBusMessage    *message,
        DBusError      *error)
{
  BusTransaction *transaction;

  spill->stats.refused += 1;
  if (sender == NULL ||
      dbus_message_get_type (message) != DBUS_MESSAGE_TYPE_METHOD_CALL ||
      dbus_message_get_no_reply (message) ||
      !addressed_to (spill, member, message))
    return;

  transaction = bus_transaction_new (spill->context);
  if (transaction == NULL)
    {
      _dbus_verbose ("dbus-mcast: no memory to refuse a call\n");
      return;
    }

  if (!bus_transaction_send_error_reply (transaction, sender, error, message))
    _dbus_verbose ("dbus-mcast: no memory to refuse a call\n");
  bus_transaction_execute_and_free (transaction);
}

/**
 * Takes a message the daemon read from @connection if it is a copy the
 * kernel diverted from that member: queues it back to the member, within
 * the bus's limits, or refuses it as stock would.
 *
 * @param spill the bus's spill
 * @param connection the member's connection the message was read from
 * @param message the message
 * @returns #FALSE if the message is not a diverted copy (the member sent
 *   it), #TRUE if it was taken
 */
dbus_bool_t
bus_mcast_spill_take (BusMcastSpill  *spill,
                      DBusConnection *connection,
                      DBusMessage    *message)
{
  const DBusSeqpacketDiverted *diverted;
  DBusError error = DBUS_ERROR_INIT;
  DBusConnection *sender;
  Member *member;

  diverted = _dbus_seqpacket_message_get_diverted (message);
  if (diverted == NULL)
    return FALSE;

  spill->stats.diverted += 1;
  while ((member = member_of (spill, connection)) == NULL)
    _dbus_wait_for_memory ();

  member->last_seq = diverted->seq;
  sender = diverted->invalid ? NULL : sender_of (spill, message, diverted);
  if (sender == NULL)
    {
      _dbus_verbose ("dbus-mcast: dropped diverted copy %u, invalid or with a false SENDER\n",
                     diverted->seq);
      member_settled (member);
    }
  else if (!bus_context_check_recipient_limits (spill->context, sender,
                                                connection, message,
                                                dbus_message_get_reply_serial (message) != 0,
                                                &error))
    {
      refuse (spill, sender, connection, message, &error);
      dbus_error_free (&error);
      member_settled (member);
    }
  else
    {
      /* The copy goes out under its sender's id (dbus-seqpacket-io.h)
       * and counts as written when the member's queue lets go of it */
      while (!dbus_message_set_data (message, copy_slot, member_ref (member),
                                     copy_written))
        {
          member_unref (member);
          _dbus_wait_for_memory ();
        }
      member->outstanding += 1;

      while (!dbus_connection_send (connection, message, NULL))
        _dbus_wait_for_memory ();
    }

  send_parked (member);
  return TRUE;
}

/**
 * Holds what the kernel delivers to @connection from now on behind @copy,
 * a message the daemon routed and is about to queue to that member: the
 * kernel diverts the member's group copies to the daemon
 * (UNIX_PEER_DIVERT), which queues them after @copy, and resumes the
 * member once @copy and they are written.  So the sender of @copy may go
 * on sending through the group at once: none of its later messages can
 * overtake @copy at this member, however slowly the member reads.  Group
 * copies diverted earlier, which the daemon may not have read yet, still
 * go first: bus_mcast_spill_send_later() parks @copy until they are
 * queued.
 *
 * @param spill the bus's spill
 * @param connection the member's connection
 * @param copy the message about to be queued to it, not shared with other
 *   recipients
 * @returns #FALSE if the kernel refused or there is no memory (then
 *   nothing changed)
 */
dbus_bool_t
bus_mcast_spill_hold (BusMcastSpill  *spill,
                      DBusConnection *connection,
                      DBusMessage    *copy)
{
#ifdef DBUS_HAVE_MCAST_UAPI
  socklen_t len = sizeof (dbus_uint32_t);
  Held *held;
  int fd, on = 1;

  held = dbus_new0 (Held, 1);
  if (held == NULL)
    return FALSE;

  held->link = _dbus_list_alloc_link (held);
  held->member = member_of (spill, connection);
  if (held->link == NULL || held->member == NULL)
    goto failed;

  if (!dbus_connection_get_socket (connection, &fd) ||
      setsockopt (fd, SOL_UNIX, UNIX_PEER_DIVERT, &on, sizeof (on)) != 0 ||
      getsockopt (fd, SOL_UNIX, UNIX_PEER_DIVERT_SEQ, &held->after, &len) != 0)
    {
      /* Diverted or not, the member is resumed when its copies are
       * written: nothing is lost or reordered */
      _dbus_verbose ("dbus-mcast: cannot hold %s: %s\n",
                     bus_connection_get_name (connection),
                     _dbus_strerror (errno));
      goto failed;
    }

  /* Diverted now: what follows must not fail */
  attach_held (held, copy);
  spill->stats.holds += 1;
  return TRUE;

 failed:
  if (held->link != NULL)
    _dbus_list_free_link (held->link);
  dbus_free (held);
  return FALSE;
#else
  return FALSE;
#endif
}

/**
 * Sends a held copy (bus_mcast_spill_hold()) later if group copies
 * diverted before it are still to be read: takes @preallocated and a
 * reference to @message then.
 *
 * @param spill the bus's spill
 * @param connection the member's connection
 * @param preallocated what to send @message with
 * @param message the message a transaction sends to @connection now
 * @returns #TRUE if the message was parked, #FALSE to send it now
 */
dbus_bool_t
bus_mcast_spill_send_later (BusMcastSpill        *spill,
                            DBusConnection       *connection,
                            DBusPreallocatedSend *preallocated,
                            DBusMessage          *message)
{
  Held *held = dbus_message_get_data (message, hold_slot);

  if (held == NULL || seq_reached (held->member->last_seq, held->after))
    return FALSE;

  _dbus_assert (held->member->connection == connection);
  held->copy = dbus_message_ref (message);
  held->preallocated = preallocated;
  _dbus_list_append_link (&held->member->parked, held->link);
  held->link = NULL;
  return TRUE;
}

/**
 * Sends @message, the daemon's own, to the member @connection after the
 * group copies the kernel diverted from it so far, which the daemon may
 * not have read yet: the member receives it after everything the group
 * delivered to it before.
 *
 * @param spill the bus's spill
 * @param connection the member's connection
 * @param message the message, for @connection alone
 */
void
bus_mcast_spill_send_behind (BusMcastSpill  *spill,
                             DBusConnection *connection,
                             DBusMessage    *message)
{
  DBusPreallocatedSend *preallocated;
#ifdef DBUS_HAVE_MCAST_UAPI
  Member *member = dbus_connection_get_data (connection, member_slot);
  socklen_t len = sizeof (dbus_uint32_t);
  dbus_uint32_t after;
  Held *held;
  int fd;
#endif

  while ((preallocated = dbus_connection_preallocate_send (connection)) == NULL)
    _dbus_wait_for_memory ();

#ifdef DBUS_HAVE_MCAST_UAPI
  /* Never diverted, or every diverted copy read: nothing to wait for */
  if (member != NULL &&
      dbus_connection_get_socket (connection, &fd) &&
      getsockopt (fd, SOL_UNIX, UNIX_PEER_DIVERT_SEQ, &after, &len) == 0 &&
      !seq_reached (member->last_seq, after))
    {
      while ((held = dbus_new0 (Held, 1)) == NULL)
        _dbus_wait_for_memory ();
      while ((held->link = _dbus_list_alloc_link (held)) == NULL)
        _dbus_wait_for_memory ();
      held->member = member;
      held->after = after;
      attach_held (held, message);
    }
#endif

  if (!bus_mcast_spill_send_later (spill, connection, preallocated, message))
    dbus_connection_send_preallocated (connection, preallocated, message, NULL);
}

/**
 * Drops what is parked for a member that disconnected.
 *
 * @param spill the bus's spill
 * @param connection the member's connection
 */
void
bus_mcast_spill_disconnected (BusMcastSpill  *spill,
                              DBusConnection *connection)
{
  Member *member = dbus_connection_get_data (connection, member_slot);

  if (member == NULL)
    return;

  while (member->parked != NULL)
    unpark (member, FALSE);
}

void
bus_mcast_spill_get_stats (BusMcastSpill      *spill,
                           BusMcastSpillStats *stats)
{
  *stats = spill->stats;
}
