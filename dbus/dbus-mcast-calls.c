/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-mcast-calls.c  The table in which a member lists the calls it
 *                     awaits, shared with dbus-daemon
 *
 * What this module is for: see dbus-mcast-calls.h.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "dbus-mcast-calls.h"
#include "dbus-sysdeps.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The member writes while the daemon reads: every field is stored and
 * loaded whole (the compiler's atomic builtins), an entry's peer last on
 * writing and first and again last on reading (_dbus_mcast_calls_get_call()) */
#define STORE(field, value) __atomic_store_n (&(field), (value), __ATOMIC_RELEASE)
#define LOAD(field) __atomic_load_n (&(field), __ATOMIC_ACQUIRE)

struct DBusMcastCalls
{
  DBusMcastCallTable *table;   /**< shared, mapped writable; NULL until
                                    attached */
  unsigned int n_slots;        /**< slots used so far: ours, not the
                                    shared copy the daemon reads */
  unsigned int n_free;         /**< slots below n_slots free again */
  unsigned int next_reply;     /**< the ring's next entry */
  dbus_uint64_t sends;         /**< our sends the kernel counted so far */
  dbus_uint16_t free_slots[DBUS_MCAST_CALLS_SLOTS];
};

_DBUS_STATIC_ASSERT (DBUS_MCAST_CALLS_SLOTS <= 65536);

/**
 * The member's side, without a table yet: allocated with the connection,
 * so that taking the table later needs no memory.
 *
 * @returns the member's side, or #NULL if no memory
 */
DBusMcastCalls *
_dbus_mcast_calls_new (void)
{
  return dbus_new0 (DBusMcastCalls, 1);
}

void
_dbus_mcast_calls_free (DBusMcastCalls *calls)
{
  if (calls == NULL)
    return;

  if (calls->table != NULL)
    munmap (calls->table, sizeof (DBusMcastCallTable));
  dbus_free (calls);
}

/**
 * Maps the table the daemon sent in its Calls signal, once.  The caller
 * keeps @fd (the mapping does not need it).
 *
 * @param calls the member's side
 * @param fd the table's memfd
 * @returns #FALSE if it has a table already or @fd is not one
 */
dbus_bool_t
_dbus_mcast_calls_attach (DBusMcastCalls *calls,
                          int             fd)
{
  struct stat st;
  void *mapped;

  if (calls->table != NULL || fstat (fd, &st) != 0 || !S_ISREG (st.st_mode) ||
      st.st_size < (off_t) sizeof (DBusMcastCallTable))
    return FALSE;

  mapped = mmap (NULL, sizeof (DBusMcastCallTable), PROT_READ | PROT_WRITE,
                 MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED)
    return FALSE;

  calls->table = mapped;
  /* The daemon admitted us while we waited for the Hello reply, which
   * comes after the table: the kernel counted nothing yet */
  calls->sends = 0;
  return TRUE;
}

/**
 * Counts one packet the kernel took from the member (a successful
 * sendmsg()), as the kernel counts them (UNIX_GROUP_SENDS).
 *
 * @param calls the member's side
 */
void
_dbus_mcast_calls_sent (DBusMcastCalls *calls)
{
  calls->sends += 1;
}

/**
 * Whether the member has a table to list its calls in.
 *
 * @param calls the member's side
 * @returns #TRUE once attached
 */
dbus_bool_t
_dbus_mcast_calls_is_attached (DBusMcastCalls *calls)
{
  return calls->table != NULL;
}

/**
 * Lists a call about to be sent to the group (in one packet): before it
 * is sent, so that the daemon finds it as soon as the callee may have it.
 *
 * @param calls the member's side
 * @param callee the callee's kernel sender id, or
 *   #DBUS_MCAST_CALLS_UNKNOWN_CALLEE while not known (a call to a
 *   well-known name: _dbus_mcast_calls_set_callee() once sent)
 * @param serial the call's serial
 * @returns its slot, or -1 if there is no table or it is full
 */
int
_dbus_mcast_calls_add (DBusMcastCalls *calls,
                       dbus_uint64_t   callee,
                       dbus_uint32_t   serial)
{
  unsigned int slot;

  if (calls->table == NULL)
    return -1;
  if (calls->n_free > 0)
    slot = calls->free_slots[--calls->n_free];
  else if (calls->n_slots < DBUS_MCAST_CALLS_SLOTS)
    slot = calls->n_slots++;
  else
    return -1;

  STORE (calls->table->calls[slot].serial, serial);
  STORE (calls->table->calls[slot].sends, calls->sends + 1);
  STORE (calls->table->calls[slot].peer, callee);
  if (slot + 1 > LOAD (calls->table->n_slots))
    STORE (calls->table->n_slots, slot + 1);
  return (int) slot;
}

/**
 * Names the member the kernel gave a listed call to a well-known name.
 *
 * @param calls the member's side
 * @param slot what _dbus_mcast_calls_add() returned
 * @param callee the callee's kernel sender id
 */
void
_dbus_mcast_calls_set_callee (DBusMcastCalls *calls,
                              int             slot,
                              dbus_uint64_t   callee)
{
  _dbus_assert (slot >= 0 && (unsigned int) slot < calls->n_slots);
  STORE (calls->table->calls[slot].peer, callee);
}

/**
 * Takes a call off the list: its reply or error arrived, or it went
 * nowhere.
 *
 * @param calls the member's side
 * @param slot what _dbus_mcast_calls_add() returned
 */
void
_dbus_mcast_calls_remove (DBusMcastCalls *calls,
                          int             slot)
{
  _dbus_assert (slot >= 0 && (unsigned int) slot < calls->n_slots);
  _dbus_assert (calls->n_free < calls->n_slots);
  STORE (calls->table->calls[slot].peer, 0);
  calls->free_slots[calls->n_free++] = (dbus_uint16_t) slot;
}

/**
 * Records a reply about to be sent to a member, in place of the oldest.
 *
 * @param calls the member's side
 * @param caller the caller's kernel sender id
 * @param serial the serial of the call it answers
 * @param packets how many packets it is sent in
 */
void
_dbus_mcast_calls_replied (DBusMcastCalls *calls,
                           dbus_uint64_t   caller,
                           dbus_uint32_t   serial,
                           unsigned int    packets)
{
  DBusMcastCallEntry *reply;

  if (calls->table == NULL)
    return;
  reply = &calls->table->replies[calls->next_reply];
  STORE (reply->peer, 0);
  STORE (reply->serial, serial);
  STORE (reply->sends, calls->sends + packets);
  STORE (reply->peer, caller);
  calls->next_reply = (calls->next_reply + 1) % DBUS_MCAST_CALLS_REPLIES;
}

/**
 * Creates a member's table: a memfd of the table's size that nobody can
 * resize, mapped read-only.
 *
 * @param fd the memfd, to send to the member and then close
 * @param table the daemon's mapping (_dbus_mcast_calls_unmap())
 * @param error set on failure
 * @returns #FALSE on failure
 */
dbus_bool_t
_dbus_mcast_calls_create (int                       *fd,
                          const DBusMcastCallTable **table,
                          DBusError                 *error)
{
  void *mapped;
  int memfd;

  memfd = memfd_create ("dbus-mcast-calls", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd < 0)
    goto failed;

  if (ftruncate (memfd, sizeof (DBusMcastCallTable)) != 0 ||
      fcntl (memfd, F_ADD_SEALS,
             F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    goto close_failed;

  mapped = mmap (NULL, sizeof (DBusMcastCallTable), PROT_READ, MAP_SHARED,
                 memfd, 0);
  if (mapped == MAP_FAILED)
    goto close_failed;

  *fd = memfd;
  *table = mapped;
  return TRUE;

 close_failed:
  {
    int saved = errno;

    close (memfd);
    errno = saved;
  }
 failed:
  dbus_set_error (error, _dbus_error_from_errno (errno),
                  "Could not create a table of calls: %s",
                  _dbus_strerror (errno));
  return FALSE;
}

void
_dbus_mcast_calls_unmap (const DBusMcastCallTable *table)
{
  if (table != NULL)
    munmap ((void *) table, sizeof (DBusMcastCallTable));
}

/**
 * How many slots the member says it used; at most the table's.
 *
 * @param table the daemon's mapping
 * @returns the slots to read
 */
unsigned int
_dbus_mcast_calls_get_n_slots (const DBusMcastCallTable *table)
{
  dbus_uint32_t n = LOAD (table->n_slots);

  return n < DBUS_MCAST_CALLS_SLOTS ? n : DBUS_MCAST_CALLS_SLOTS;
}

/**
 * Reads one slot.  A slot the member rewrites meanwhile reads as the
 * call before or the one after (a rewritten slot that keeps its callee
 * may give the new serial), never a call of another callee.
 *
 * @param table the daemon's mapping
 * @param slot below _dbus_mcast_calls_get_n_slots()
 * @param call the call listed there; its callee may be
 *   #DBUS_MCAST_CALLS_UNKNOWN_CALLEE
 * @returns #FALSE if the slot is empty
 */
dbus_bool_t
_dbus_mcast_calls_get_call (const DBusMcastCallTable *table,
                            unsigned int              slot,
                            DBusMcastCallEntry       *call)
{
  const DBusMcastCallEntry *entry;

  _dbus_assert (slot < DBUS_MCAST_CALLS_SLOTS);
  entry = &table->calls[slot];
  call->peer = LOAD (entry->peer);
  call->serial = LOAD (entry->serial);
  call->sends = LOAD (entry->sends);
  return call->peer != 0 && LOAD (entry->peer) == call->peer;
}

/**
 * Whether the member may await a reply from one of @callees: it lists a
 * call to one of them, or one whose callee it does not know yet.
 *
 * @param table the daemon's mapping
 * @param callees kernel sender ids
 * @param n_callees how many
 * @returns #TRUE if it may
 */
dbus_bool_t
_dbus_mcast_calls_awaits (const DBusMcastCallTable *table,
                          const dbus_uint64_t      *callees,
                          int                       n_callees)
{
  unsigned int n = _dbus_mcast_calls_get_n_slots (table);
  unsigned int slot;
  int i;

  for (slot = 0; slot < n; slot++)
    {
      dbus_uint64_t peer = LOAD (table->calls[slot].peer);

      if (peer == DBUS_MCAST_CALLS_UNKNOWN_CALLEE)
        return TRUE;
      for (i = 0; i < n_callees && peer != 0; i++)
        if (peer == callees[i])
          return TRUE;
    }

  return FALSE;
}

/**
 * Whether the member lists, among its last replies, a reply to a call
 * that it has sent: one the kernel had counted when it had counted
 * @sent of the member's sends.
 *
 * @param table the daemon's mapping of the callee's table
 * @param sent the callee's sends the kernel counted (UNIX_GROUP_SENDS),
 *   read before the table
 * @param caller the caller's kernel sender id
 * @param serial the call's serial
 * @returns #TRUE if it does
 */
dbus_bool_t
_dbus_mcast_calls_has_replied (const DBusMcastCallTable *table,
                               dbus_uint64_t             sent,
                               dbus_uint64_t             caller,
                               dbus_uint32_t             serial)
{
  unsigned int i;

  for (i = 0; i < DBUS_MCAST_CALLS_REPLIES; i++)
    {
      const DBusMcastCallEntry *reply = &table->replies[i];

      if (LOAD (reply->peer) == caller && LOAD (reply->serial) == serial &&
          LOAD (reply->sends) <= sent && LOAD (reply->peer) == caller)
        return TRUE;
    }

  return FALSE;
}
