/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-observer.c  dbus-daemon's own member of each multicast group: the
 *                   members' messages in the kernel's order, for monitors
 *
 * See mcast-observer.h for what this module is for.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "mcast-observer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <linux/filter.h>

#include <dbus/dbus-hash.h>
#include <dbus/dbus-internals.h>
#include <dbus/dbus-mainloop.h>
#include <dbus/dbus-mcast-calls.h>
#include <dbus/dbus-mcast-member.h>
#include <dbus/dbus-mcast-uapi.h>
#include <dbus/dbus-seqpacket-io.h>
#include <dbus/dbus-server-socket.h>
#include <dbus/dbus-sysdeps-seqpacket.h>
#include <dbus/dbus-sysdeps-unix.h>
#include <dbus/dbus-watch.h>
#include "connection.h"
#include "mcast-members.h"
#include "mcast-routing.h"
#include "services.h"
#include "utils.h"

/* The daemon's member of the group that @server listens on */
typedef struct
{
  BusMcastObserver *observer;
  DBusServer *server;          /**< referenced */
  DBusSocket member;           /**< connected to the group */
  DBusSocket acceptor;         /**< the server's end, once claimed */
  DBusWatch *watches[2];       /**< member, acceptor: readable */
  dbus_uint32_t last_seq;      /**< last copy diverted to the acceptor, 0
                                    once resumed */
} Group;

/* A call to a member that the daemon's member saw while monitors were
 * connected, or that its caller listed when the first one came, and no
 * reply yet: if its callee leaves, stock would show the monitors its
 * NoReply error */
typedef struct
{
  char *caller;                /**< unique name */
  dbus_uint32_t serial;
  dbus_bool_t listed;          /**< from its caller's table, not seen */
} Call;

/* The calls waiting for one member's reply, oldest first */
typedef struct
{
  DBusList *calls;             /**< Call * */
  DBusHashTable *index;        /**< call_key() -> its link in calls */
} Callee;

/* "caller serial": room for the longest */
#define CALL_KEY_SIZE (DBUS_MAXIMUM_NAME_LENGTH + sizeof (" 4294967295"))

/* A member's table of the calls it awaits (dbus-mcast-calls.h) */
typedef struct
{
  DBusConnection *connection;  /**< not referenced: forgotten when it leaves */
  dbus_uint64_t id;            /**< its kernel sender id */
  const DBusMcastCallTable *table;
  /* What the kernel said the member had sent when the first monitor
   * came (bus_mcast_observer_take_listed_calls()) */
  dbus_uint64_t sent;          /**< its sends (UNIX_GROUP_SENDS) */
  dbus_uint64_t sent_to;       /**< the last one's addressee, or 0 */
} Table;

struct BusMcastObserver
{
  BusContext *context;
  DBusList *groups;            /**< Group * */
  DBusHashTable *callees;      /**< unique name -> Callee * */
  DBusHashTable *tables;       /**< DBusConnection * -> Table * */
  /** caller's unique name -> how many of its calls are remembered */
  DBusHashTable *callers;
  dbus_bool_t offered;         /**< the bus may promote its clients */
  dbus_bool_t open;            /**< a monitor the daemon serves is connected */
  dbus_bool_t draining;        /**< forwarding: do not drain again */
  int holds;                   /**< bus_mcast_observer_hold() calls not
                                    yet released */
  DBusString packet;           /**< one packet at a time */
};

static Group *
find_group (BusMcastObserver *observer,
            DBusServer       *server)
{
  DBusList *link;

  for (link = _dbus_list_get_first_link (&observer->groups);
       link != NULL;
       link = _dbus_list_get_next_link (&observer->groups, link))
    {
      Group *group = link->data;

      if (group->server == server)
        return group;
    }

  return NULL;
}

static dbus_bool_t
is_admitted (Group *group)
{
  return group != NULL && _dbus_socket_is_valid (group->acceptor);
}

static void
group_free (Group *group)
{
  DBusLoop *loop = bus_context_get_loop (group->observer->context);
  int i;

  for (i = 0; i < 2; i++)
    {
      if (group->watches[i] == NULL)
        continue;
      _dbus_loop_remove_watch (loop, group->watches[i]);
      _dbus_watch_invalidate (group->watches[i]);
      _dbus_watch_unref (group->watches[i]);
    }

  if (_dbus_socket_is_valid (group->member))
    _dbus_close_socket (group->member, NULL);
  if (_dbus_socket_is_valid (group->acceptor))
    _dbus_close_socket (group->acceptor, NULL);
  dbus_server_unref (group->server);
  dbus_free (group);
}

static void
call_free (Call *call)
{
  dbus_free (call->caller);
  dbus_free (call);
}

static void
callee_free (void *data)
{
  Callee *callee = data;

  /* _dbus_hash_table_insert_string() frees the NULL value of a new key */
  if (callee == NULL)
    return;

  _dbus_list_clear_full (&callee->calls, (DBusFreeFunction) call_free);
  if (callee->index != NULL)
    _dbus_hash_table_unref (callee->index);
  dbus_free (callee);
}

static void
call_key (char          *key,
          const char    *caller,
          dbus_uint32_t  serial)
{
  snprintf (key, CALL_KEY_SIZE, "%s %u", caller, serial);
}

static void
table_free (void *data)
{
  Table *table = data;

  if (table == NULL)
    return;

  _dbus_mcast_calls_unmap (table->table);
  dbus_free (table);
}

/* Adds @delta to how many calls of @caller are remembered.  FALSE if no
 * memory, only for a caller with none yet. */
static dbus_bool_t
count_calls (BusMcastObserver *observer,
             const char       *caller,
             int               delta)
{
  DBusHashIter iter;
  char *key;

  if (_dbus_hash_iter_lookup (observer->callers, (char *) caller, FALSE,
                              &iter))
    {
      uintptr_t n = (uintptr_t) _dbus_hash_iter_get_value (&iter) + delta;

      if (n == 0)
        _dbus_hash_iter_remove_entry (&iter);
      else
        _dbus_hash_iter_set_value (&iter, (void *) n);
      return TRUE;
    }

  _dbus_assert (delta > 0);
  key = _dbus_strdup (caller);
  if (key == NULL ||
      !_dbus_hash_table_insert_string (observer->callers, key,
                                       (void *) (uintptr_t) delta))
    {
      dbus_free (key);
      return FALSE;
    }
  return TRUE;
}

/* Removes @link, a call to @callee, and forgets the call */
static void
call_remove (BusMcastObserver *observer,
             Callee           *callee,
             DBusList         *link)
{
  Call *call = link->data;
  char key[CALL_KEY_SIZE];

  call_key (key, call->caller, call->serial);
  /* A caller that made two calls with one serial indexes the last */
  if (_dbus_hash_table_lookup_string (callee->index, key) == link)
    _dbus_hash_table_remove_string (callee->index, key);
  _dbus_list_remove_link (&callee->calls, link);
  count_calls (observer, call->caller, -1);
  call_free (call);
}

/* The call @serial of @caller to @callee, or NULL */
static DBusList *
call_find (Callee        *callee,
           const char    *caller,
           dbus_uint32_t  serial)
{
  char key[CALL_KEY_SIZE];

  call_key (key, caller, serial);
  return _dbus_hash_table_lookup_string (callee->index, key);
}

/* Remembers the call @serial from @caller (a unique name) to the member
 * named @name, until its reply or its callee's departure: seen (after
 * the calls remembered so far) or listed (before them).  Of each caller,
 * at most the bus's max_replies_per_connection calls, as many as stock
 * lets it make (a member sends the calls beyond to the daemon, which
 * refuses them).  FALSE if no memory (the call is not remembered; the
 * callee's entry may be there already). */
static dbus_bool_t
call_made (BusMcastObserver *observer,
           const char       *caller,
           const char       *name,
           dbus_uint32_t     serial,
           dbus_bool_t       listed)
{
  int limit = bus_context_get_max_replies_per_connection (observer->context);
  DBusList *link, *added;
  char *key = NULL;
  Callee *callee;
  Call *call;

  callee = _dbus_hash_table_lookup_string (observer->callees, name);
  if (callee == NULL)
    {
      char *callee_key = _dbus_strdup (name);

      callee = dbus_new0 (Callee, 1);
      if (callee_key == NULL || callee == NULL ||
          (callee->index = _dbus_hash_table_new (DBUS_HASH_STRING, dbus_free,
                                                 NULL)) == NULL ||
          !_dbus_hash_table_insert_string (observer->callees, callee_key,
                                           callee))
        {
          dbus_free (callee_key);
          callee_free (callee);
          return FALSE;
        }
    }

  /* A call listed and then seen is remembered once, where it was seen;
   * two seen with one serial (a caller may reuse serials) both stay */
  link = call_find (callee, caller, serial);
  if (link != NULL && listed)
    return TRUE;
  if (link != NULL && !((Call *) link->data)->listed)
    link = NULL;
  if (link == NULL && limit >= 0 &&
      (uintptr_t) _dbus_hash_table_lookup_string (observer->callers, caller) >=
      (uintptr_t) limit)
    return TRUE;

  call = dbus_new0 (Call, 1);
  if (call == NULL)
    return FALSE;
  call->caller = _dbus_strdup (caller);
  call->serial = serial;
  call->listed = listed;
  key = dbus_malloc (CALL_KEY_SIZE);
  if (call->caller == NULL || key == NULL)
    goto oom;
  call_key (key, caller, serial);

  if (!count_calls (observer, caller, 1))
    goto oom;
  if (!(listed ? _dbus_list_prepend (&callee->calls, call) :
        _dbus_list_append (&callee->calls, call)))
    goto uncount;
  added = listed ? _dbus_list_get_first_link (&callee->calls) :
                   _dbus_list_get_last_link (&callee->calls);
  if (!_dbus_hash_table_insert_string (callee->index, key, added))
    {
      _dbus_list_remove_link (&callee->calls, added);
      goto uncount;
    }

  if (link != NULL)
    call_remove (observer, callee, link);
  return TRUE;

 uncount:
  count_calls (observer, caller, -1);
 oom:
  dbus_free (key);
  call_free (call);
  return FALSE;
}

/* @message, from the member @sender, answers a call it was made */
static void
call_answered (BusMcastObserver *observer,
               const char       *sender,
               DBusMessage      *message)
{
  Callee *callee = _dbus_hash_table_lookup_string (observer->callees, sender);
  const char *caller = dbus_message_get_destination (message);
  dbus_uint32_t serial = dbus_message_get_reply_serial (message);
  DBusList *link;

  if (callee == NULL || caller == NULL)
    return;

  link = call_find (callee, caller, serial);
  if (link != NULL)
    call_remove (observer, callee, link);
}

BusMcastObserver *
bus_mcast_observer_new (BusContext *context)
{
  BusMcastObserver *observer;

  observer = dbus_new0 (BusMcastObserver, 1);
  if (observer == NULL)
    return NULL;

  observer->callees = _dbus_hash_table_new (DBUS_HASH_STRING, dbus_free,
                                            callee_free);
  if (observer->callees == NULL)
    goto failed;

  observer->tables = _dbus_hash_table_new (DBUS_HASH_UINTPTR, NULL,
                                           table_free);
  if (observer->tables == NULL)
    goto failed;

  observer->callers = _dbus_hash_table_new (DBUS_HASH_STRING, dbus_free,
                                            NULL);
  if (observer->callers == NULL)
    goto failed;

  /* Allocated once: reading the group must not fail for memory */
  if (!_dbus_string_init_preallocated (&observer->packet,
                                       DBUS_SEQPACKET_FRAGMENT_SIZE))
    goto failed;

  observer->context = context;
  return observer;

 failed:
  if (observer->callees != NULL)
    _dbus_hash_table_unref (observer->callees);
  if (observer->tables != NULL)
    _dbus_hash_table_unref (observer->tables);
  if (observer->callers != NULL)
    _dbus_hash_table_unref (observer->callers);
  dbus_free (observer);
  return NULL;
}

void
bus_mcast_observer_free (BusMcastObserver *observer)
{
  Group *group;

  if (observer == NULL)
    return;

  while ((group = _dbus_list_pop_first (&observer->groups)) != NULL)
    group_free (group);

  _dbus_hash_table_unref (observer->callees);
  _dbus_hash_table_unref (observer->tables);
  _dbus_hash_table_unref (observer->callers);
  _dbus_string_free (&observer->packet);
  dbus_free (observer);
}

/* Shows @message, from @sender (NULL: the bus driver) to
 * @addressed_recipient (NULL: none or the driver), to the monitors the
 * daemon serves, as dispatch shows them a message.  FALSE if no memory
 * (nobody was shown it). */
static dbus_bool_t
show_monitors (BusMcastObserver *observer,
               DBusConnection   *sender,
               DBusConnection   *addressed_recipient,
               DBusMessage      *message)
{
  BusTransaction *transaction = bus_transaction_new (observer->context);

  if (transaction == NULL)
    return FALSE;

  if (!bus_transaction_capture (transaction, sender, addressed_recipient,
                                message))
    {
      bus_transaction_cancel_and_free (transaction);
      return FALSE;
    }

  bus_transaction_execute_and_free (transaction);
  return TRUE;
}

/* Shows @message, a group message of the member with kernel id
 * @sender_id, to the monitors the daemon serves, as dispatch would have.
 * Monitors see every message of the group: each step waits for memory. */
static void
forward (BusMcastObserver *observer,
         dbus_uint64_t     sender_id,
         DBusMessage      *message)
{
  DBusConnection *addressed_recipient = NULL;
  const char *destination;
  char name[DBUS_MCAST_SENDER_NAME_SIZE];

  /* What the daemon routes as it came straight, monitors see from there */
  if (!bus_mcast_routing_observed (message))
    return;

  /* As dispatch writes it: the sender's own name, whatever it claimed */
  _dbus_mcast_name_of_sender_id (sender_id, name);
  while (!dbus_message_set_sender (message, name) ||
         !dbus_message_set_container_instance (message, NULL))
    _dbus_wait_for_memory ();

  destination = dbus_message_get_destination (message);
  if (destination != NULL && strcmp (destination, DBUS_SERVICE_DBUS) != 0)
    addressed_recipient = bus_mcast_owner_of (bus_context_get_registry (observer->context), destination);

  switch (dbus_message_get_type (message))
    {
    case DBUS_MESSAGE_TYPE_METHOD_CALL:
      if (!dbus_message_get_no_reply (message) && addressed_recipient != NULL &&
          bus_mcast_members_is_member (addressed_recipient))
        {
          while (!call_made (observer, name,
                             bus_connection_get_name (addressed_recipient),
                             dbus_message_get_serial (message), FALSE))
            _dbus_wait_for_memory ();
        }
      break;
    case DBUS_MESSAGE_TYPE_METHOD_RETURN:
    case DBUS_MESSAGE_TYPE_ERROR:
      call_answered (observer, name, message);
      break;
    default:
      break;
    }

  while (!show_monitors (observer, bus_mcast_owner_of (bus_context_get_registry (observer->context), name),
                         addressed_recipient, message))
    _dbus_wait_for_memory ();
}

/* Reads one packet from @fd, the daemon's member or (with @acceptor) its
 * acceptor end, and forwards it to the monitors, or, if it is a member's
 * copy from the group's copy queue, hands it to routing.  Returns the
 * bytes it took from the socket, 0 once there is none. */
static int
read_one (Group      *group,
          DBusSocket  fd,
          dbus_bool_t acceptor)
{
  BusMcastObserver *observer = group->observer;
  DBusSeqpacketDiverted copy = { 0, 0, FALSE };
  dbus_uint64_t sender_id = 0;
  dbus_int64_t commits = -1;
  DBusMcastVerdict verdict;
  DBusMessage *message;
  int len;

  _dbus_string_set_length (&observer->packet, 0);
  len = _dbus_seqpacket_read_group_packet (fd, &observer->packet, &sender_id,
                                           acceptor ? &copy : NULL,
                                           acceptor ? &commits : NULL);
  if (len < 0 && errno == EPROTO)
    return 1; /* discarded, as a member would */
  if (len <= 0)
    return 0;

  if (commits >= 0)
    {
      bus_mcast_routing_take_copy (
          bus_context_get_mcast_routing (observer->context), sender_id,
          (dbus_uint32_t) commits, &observer->packet, len);
      return len;
    }

  if (copy.seq != 0)
    group->last_seq = copy.seq;

  while ((verdict = _dbus_mcast_load_packet (sender_id, &observer->packet,
                                             0, len, &message)) ==
         DBUS_MCAST_NO_MEMORY)
    _dbus_wait_for_memory ();
  if (verdict != DBUS_MCAST_KEEP)
    return len;

  forward (observer, sender_id, message);
  dbus_message_unref (message);
  return len;
}

/* The bytes queued on @fd now (all of them, if it cannot say) */
static int
queued_bytes (DBusSocket fd)
{
  int queued;

  return ioctl (fd.fd, FIONREAD, &queued) == 0 ? queued : INT_MAX;
}

static void
drain_group (Group *group)
{
  int left, got;

  if (!is_admitted (group))
    return;

  for (;;)
    {
      /* Everything on the member's socket came before anything diverted */
      while (read_one (group, group->member, FALSE) > 0)
        ;
      /* What the copy queue holds now, not what members send meanwhile,
       * which the next drain takes: each drain ends */
      left = queued_bytes (group->acceptor);
      while (left > 0 && (got = read_one (group, group->acceptor, TRUE)) > 0)
        left -= got;

      if (group->last_seq == 0)
        return;

#ifdef DBUS_HAVE_MCAST_UAPI
      if (setsockopt (group->acceptor.fd, SOL_UNIX, UNIX_PEER_RESUME,
                      &group->last_seq, sizeof (group->last_seq)) == 0)
        {
          group->last_seq = 0;
          return;
        }
#endif

      /* EAGAIN: newer copies were diverted meanwhile; read them first */
      if (errno != EAGAIN)
        {
          _dbus_verbose ("dbus-mcast: cannot resume the daemon's member: %s\n",
                         _dbus_strerror (errno));
          return;
        }
    }
}

dbus_bool_t
bus_mcast_observer_hold (BusMcastObserver *observer,
                         dbus_bool_t       held)
{
#ifdef DBUS_HAVE_MCAST_UAPI
  Group *group = observer != NULL ? _dbus_list_get_first (&observer->groups) : NULL;
  int value = held ? 1 : 0;

  if (observer == NULL || (!held && observer->holds == 0))
    return FALSE;

  /* The kernel's hold is one flag: the first hold sets it, the last
   * release clears it */
  if (observer->holds == (held ? 0 : 1) &&
      (!is_admitted (group) ||
       setsockopt (group->acceptor.fd, SOL_UNIX, UNIX_GROUP_HOLD, &value,
                   sizeof (value)) != 0))
    {
      if (!held)
        observer->holds = 0;
      return FALSE;
    }

  observer->holds += held ? 1 : -1;
  return TRUE;
#else
  return FALSE;
#endif
}

void
bus_mcast_observer_drain (BusMcastObserver *observer)
{
  DBusList *link;

  /* forward() executes transactions of its own */
  if (observer == NULL || observer->draining)
    return;

  observer->draining = TRUE;
  for (link = _dbus_list_get_first_link (&observer->groups);
       link != NULL;
       link = _dbus_list_get_next_link (&observer->groups, link))
    drain_group (link->data);
  observer->draining = FALSE;
}

dbus_bool_t
bus_mcast_observer_is_draining (BusMcastObserver *observer)
{
  return observer != NULL && observer->draining;
}

static dbus_bool_t
readable (DBusWatch    *watch,
          unsigned int  flags,
          void         *data)
{
  Group *group = data;

  /* Drains, and routes the copies it finds */
  bus_mcast_routing_route_copies (
      bus_context_get_mcast_routing (group->observer->context));
  return TRUE;
}

#ifdef DBUS_HAVE_MCAST_UAPI
static dbus_bool_t
set_peer_filter (Group       *group,
                 dbus_bool_t  open,
                 DBusError   *error)
{
  struct sock_filter all[] = { BPF_STMT (BPF_RET | BPF_K, 0xffffffff) };
  struct sock_filter none[] = { BPF_STMT (BPF_RET | BPF_K, 0) };
  struct sock_fprog prog;

  /* Zeroed: the kernel copies the padding after len too */
  _DBUS_ZERO (prog);
  prog.len = 1;
  prog.filter = open ? all : none;
  if (setsockopt (group->acceptor.fd, SOL_UNIX, UNIX_PEER_FILTER, &prog,
                  sizeof (prog)) == 0)
    return TRUE;

  dbus_set_error (error, _dbus_error_from_errno (errno),
                  "Could not set the filter of the daemon's multicast member: %s",
                  _dbus_strerror (errno));
  return FALSE;
}

/* Makes the claimed connection of @group a member that hears what the
 * monitors need and never holds the group back, and its acceptor end the
 * group's copy queue, and reads both from the main loop */
static dbus_bool_t
admit (Group     *group,
       DBusError *error)
{
  DBusLoop *loop = bus_context_get_loop (group->observer->context);
  struct unix_accept_req req;
  socklen_t len = sizeof (int);
  int sndbuf, i, one = 1;

  /* Its budget: what a member gets (mcast-admission.c) */
  if (getsockopt (group->acceptor.fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) != 0)
    sndbuf = 0;

  memset (&req, 0, sizeof (req));
  req.flags = UNIX_MREQ_DIVERT_WHEN_FULL;
  req.rcvbuf = sndbuf > 0 ? (dbus_uint32_t) sndbuf : 0;

  if (!_dbus_seqpacket_set_passid (group->member, error) ||
      !_dbus_seqpacket_set_passid (group->acceptor, error) ||
      !set_peer_filter (group, group->observer->open, error))
    return FALSE;

  if (setsockopt (group->acceptor.fd, SOL_UNIX, UNIX_ACCEPT_GROUP, &req,
                  sizeof (req)) != 0 ||
      setsockopt (group->acceptor.fd, SOL_UNIX, UNIX_GROUP_COPY_QUEUE, &one,
                  sizeof (one)) != 0)
    {
      dbus_set_error (error, _dbus_error_from_errno (errno),
                      "Could not admit the daemon's member: %s",
                      _dbus_strerror (errno));
      return FALSE;
    }

  for (i = 0; i < 2; i++)
    {
      DBusSocket fd = i == 0 ? group->member : group->acceptor;

      group->watches[i] = _dbus_watch_new (_dbus_socket_get_pollable (fd),
                                           DBUS_WATCH_READABLE, TRUE,
                                           readable, group, NULL);
      if (group->watches[i] != NULL &&
          !_dbus_loop_add_watch (loop, group->watches[i]))
        {
          _dbus_watch_unref (group->watches[i]);
          group->watches[i] = NULL;
        }
      if (group->watches[i] == NULL)
        {
          BUS_SET_OOM (error);
          return FALSE;
        }
    }

  return TRUE;
}
#else
static dbus_bool_t
set_peer_filter (Group       *group,
                 dbus_bool_t  open,
                 DBusError   *error)
{
  return TRUE;
}

static dbus_bool_t
admit (Group     *group,
       DBusError *error)
{
  dbus_set_error_const (error, DBUS_ERROR_NOT_SUPPORTED,
                        "Built without the kernel's multicast interface");
  return FALSE;
}
#endif

/* Connects the daemon's member of the group @server listens on; its
 * server accepts it later, from the main loop */
static dbus_bool_t
connect_group (BusMcastObserver *observer,
               DBusServer       *server,
               DBusError        *error)
{
  DBusAddressEntry **entries = NULL;
  const char *path, *abstract;
  char *address;
  Group *group;
  int n;

  group = dbus_new0 (Group, 1);
  address = dbus_server_get_address (server);
  if (group == NULL || address == NULL)
    {
      dbus_free (group);
      dbus_free (address);
      BUS_SET_OOM (error);
      return FALSE;
    }

  group->observer = observer;
  group->server = dbus_server_ref (server);
  _dbus_socket_invalidate (&group->member);
  _dbus_socket_invalidate (&group->acceptor);

  if (!dbus_parse_address (address, &entries, &n, error))
    goto failed;

  path = dbus_address_entry_get_value (entries[0], "path");
  abstract = dbus_address_entry_get_value (entries[0], "abstract");
  if (path == NULL && abstract == NULL)
    {
      dbus_set_error (error, DBUS_ERROR_BAD_ADDRESS,
                      "No path in the listening address %s", address);
      goto failed;
    }

  group->member = _dbus_connect_unix_seqpacket (path != NULL ? path : abstract,
                                                path == NULL, TRUE, error);
  if (!_dbus_socket_is_valid (group->member))
    goto failed;

  if (!_dbus_list_append (&observer->groups, group))
    {
      BUS_SET_OOM (error);
      goto failed;
    }

  dbus_address_entries_free (entries);
  dbus_free (address);
  return TRUE;

 failed:
  if (entries != NULL)
    dbus_address_entries_free (entries);
  dbus_free (address);
  group_free (group);
  return FALSE;
}

void
bus_mcast_observer_offer (BusMcastObserver *observer,
                          DBusList         *servers,
                          dbus_bool_t       offered)
{
  dbus_bool_t first = TRUE;
  DBusList *link;

  observer->offered = offered;
  for (link = _dbus_list_get_first_link (&servers);
       link != NULL;
       link = _dbus_list_get_next_link (&servers, link))
    {
      DBusError error = DBUS_ERROR_INIT;
      Group *group = find_group (observer, link->data);
      dbus_bool_t here = offered && first;

      if (!_dbus_server_socket_set_mcast_offered (link->data,
                                                  here && is_admitted (group)))
        continue;

      /* One group: the filters assume that every member reaches every
       * other one, and the daemon commits them in one group
       * (mcast-members.h).  Clients of further groups stay classic. */
      first = FALSE;
      if (!here || group != NULL)
        continue;

      /* A group: offered once the daemon's member is in (claim) */
      if (!connect_group (observer, link->data, &error))
        {
          bus_context_log (observer->context, DBUS_SYSTEM_LOG_WARNING,
                           "Not promoting clients into a multicast group: %s",
                           error.message);
          dbus_error_free (&error);
        }
    }
}

dbus_bool_t
bus_mcast_observer_offers (BusMcastObserver *observer)
{
  return observer->offered;
}

dbus_bool_t
bus_mcast_observer_claim (BusMcastObserver *observer,
                          DBusServer       *server,
                          DBusConnection   *connection)
{
  DBusError error = DBUS_ERROR_INIT;
  Group *group = find_group (observer, server);
  struct sockaddr_un ours, peer;
  socklen_t ours_len = sizeof (ours), peer_len = sizeof (peer);
  int fd, own;

  if (group == NULL || is_admitted (group) ||
      !dbus_connection_get_socket (connection, &fd))
    return FALSE;

  /* Its peer has the abstract name the kernel bound our member to, which
   * nobody else can have (_dbus_connect_unix_seqpacket()) */
  if (getsockname (group->member.fd, (struct sockaddr *) &ours, &ours_len) != 0 ||
      getpeername (fd, (struct sockaddr *) &peer, &peer_len) != 0 ||
      ours_len != peer_len || ours_len <= sizeof (sa_family_t) ||
      memcmp (&ours, &peer, ours_len) != 0)
    return FALSE;

  own = fcntl (fd, F_DUPFD_CLOEXEC, 3);
  dbus_connection_close (connection);
  if (own < 0)
    {
      dbus_set_error (&error, _dbus_error_from_errno (errno),
                      "Could not keep the daemon's member: %s",
                      _dbus_strerror (errno));
      goto failed;
    }

  group->acceptor.fd = own;
  if (!admit (group, &error))
    goto failed;

  _dbus_server_socket_set_mcast_offered (server, observer->offered);
  return TRUE;

 failed:
  bus_context_log (observer->context, DBUS_SYSTEM_LOG_WARNING,
                   "Not promoting clients into a multicast group: %s",
                   error.message);
  dbus_error_free (&error);
  _dbus_list_remove (&observer->groups, group);
  group_free (group);
  return TRUE;
}

/* A caller's calls, newest first: stock shows their errors in the order
 * they were made, which a monitor tells by their serials */
static int
newest_first (const void *a,
              const void *b)
{
  const DBusMcastCallEntry *x = a, *y = b;

  return x->serial < y->serial ? 1 : x->serial > y->serial ? -1 : 0;
}

/* The first monitor came, and the daemon's member reads every call from
 * now on (its filter is open, and a commit since made sure that a send
 * that ran the closed filter has queued its copies and one that
 * overlapped runs the open one): each call between members its caller
 * lists and sent, and to
 * which its callee sent no reply it lists, is one it would have seen
 * unanswered, made before the calls it will see.  Which listed calls
 * and replies were sent, and which member got a call to a well-known
 * name, the kernel's count of each member's sends says: a callee killed
 * between listing its reply and sending it did not answer, and a caller
 * stopped before writing its callee's id is still read right. */
void
bus_mcast_observer_take_listed_calls (BusMcastObserver *observer)
{
  BusRegistry *registry = bus_context_get_registry (observer->context);
  DBusMcastCallEntry *calls;
  DBusHashIter iter;

  while ((calls = dbus_new (DBusMcastCallEntry, DBUS_MCAST_CALLS_SLOTS)) == NULL)
    _dbus_wait_for_memory ();

  /* What every member sent, before any table is read: an entry listed
   * later is sent later, and the daemon's member reads it then.  A
   * member the kernel cannot tell about counts as having sent all it
   * listed, and its calls to well-known names stay unknown. */
  _dbus_hash_iter_init (observer->tables, &iter);
  while (_dbus_hash_iter_next (&iter))
    {
      Table *table = _dbus_hash_iter_get_value (&iter);
      DBusSocket fd;

      if (!dbus_connection_get_socket (table->connection, &fd.fd) ||
          !_dbus_seqpacket_get_sends (fd, &table->sent, &table->sent_to))
        {
          table->sent = _DBUS_UINT64_MAX;
          table->sent_to = 0;
        }
    }

  _dbus_hash_iter_init (observer->tables, &iter);
  while (_dbus_hash_iter_next (&iter))
    {
      Table *caller = _dbus_hash_iter_get_value (&iter);
      unsigned int n = _dbus_mcast_calls_get_n_slots (caller->table);
      unsigned int slot, n_calls = 0, i;

      for (slot = 0; slot < n; slot++)
        {
          DBusMcastCallEntry *call = &calls[n_calls];

          if (!_dbus_mcast_calls_get_call (caller->table, slot, call))
            continue;
          /* A call to a well-known name whose caller did not write yet
           * which member the kernel gave it to: if it was the caller's
           * last send, the kernel says; if it is not sent yet, the
           * daemon's member will read it */
          if (call->peer == DBUS_MCAST_CALLS_UNKNOWN_CALLEE)
            {
              if (call->sends != caller->sent || caller->sent_to == 0)
                continue;
              call->peer = caller->sent_to;
            }
          /* Listed but not sent: the daemon's member will read it */
          else if (call->sends > caller->sent)
            continue;
          n_calls++;
        }
      qsort (calls, n_calls, sizeof (calls[0]), newest_first);

      /* Each goes in front: the oldest ends up first */
      for (i = 0; i < n_calls; i++)
        {
          char name[DBUS_MCAST_SENDER_NAME_SIZE];
          DBusConnection *connection;
          Table *callee;

          _dbus_mcast_name_of_sender_id (calls[i].peer, name);
          connection = bus_mcast_owner_of (registry, name);
          callee = connection == NULL ? NULL :
                   _dbus_hash_table_lookup_uintptr (observer->tables,
                                                    (uintptr_t) connection);
          if (callee == NULL ||
              _dbus_mcast_calls_has_replied (callee->table, callee->sent,
                                             caller->id, calls[i].serial))
            continue;

          while (!call_made (observer,
                             bus_connection_get_name (caller->connection),
                             name, calls[i].serial, TRUE))
            _dbus_wait_for_memory ();
        }
    }

  dbus_free (calls);
}

DBusMessage *
bus_mcast_observer_new_calls (BusMcastObserver *observer,
                              DBusConnection   *connection,
                              DBusError        *error)
{
  DBusMessage *signal = NULL;
  Table *table;
  int fd = -1;

  table = dbus_new0 (Table, 1);
  if (table == NULL)
    goto oom;

  table->connection = connection;
  table->id = _dbus_mcast_sender_id_of_name (bus_connection_get_name (connection));
  if (!_dbus_mcast_calls_create (&fd, &table->table, error))
    {
      dbus_free (table);
      return NULL;
    }

  signal = _dbus_mcast_daemon_signal_new (DBUS_MCAST_CALLS);
  if (signal == NULL ||
      !dbus_message_set_destination (signal,
                                     bus_connection_get_name (connection)) ||
      !dbus_message_append_args (signal, DBUS_TYPE_UNIX_FD, &fd,
                                 DBUS_TYPE_INVALID) ||
      !_dbus_hash_table_insert_uintptr (observer->tables,
                                        (uintptr_t) connection, table))
    goto oom;

  _dbus_close (fd, NULL);
  return signal;

 oom:
  if (signal != NULL)
    dbus_message_unref (signal);
  if (fd >= 0)
    _dbus_close (fd, NULL);
  table_free (table);
  BUS_SET_OOM (error);
  return NULL;
}

dbus_bool_t
bus_mcast_observer_awaits (BusMcastObserver    *observer,
                           DBusConnection      *connection,
                           const dbus_uint64_t *departed,
                           int                  n_departed)
{
  Table *table = _dbus_hash_table_lookup_uintptr (observer->tables,
                                                  (uintptr_t) connection);

  return table != NULL &&
         _dbus_mcast_calls_awaits (table->table, departed, n_departed);
}

void
bus_mcast_observer_forget_calls (BusMcastObserver *observer,
                                 DBusConnection   *connection)
{
  if (observer != NULL)
    _dbus_hash_table_remove_uintptr (observer->tables, (uintptr_t) connection);
}

dbus_bool_t
bus_mcast_observer_set_open (BusMcastObserver *observer,
                             dbus_bool_t       open,
                             DBusError        *error)
{
  DBusList *link;

  for (link = _dbus_list_get_first_link (&observer->groups);
       link != NULL;
       link = _dbus_list_get_next_link (&observer->groups, link))
    {
      if (is_admitted (link->data) &&
          !set_peer_filter (link->data, open, error))
        {
          DBusList *undo;

          for (undo = _dbus_list_get_first_link (&observer->groups);
               undo != link;
               undo = _dbus_list_get_next_link (&observer->groups, undo))
            if (is_admitted (undo->data))
              set_peer_filter (undo->data, observer->open, NULL);
          return FALSE;
        }
    }

  /* Calls seen from now on are the monitors' business only */
  if (!open)
    {
      DBusHashIter iter;

      _dbus_hash_iter_init (observer->callees, &iter);
      while (_dbus_hash_iter_next (&iter))
        _dbus_hash_iter_remove_entry (&iter);
      _dbus_hash_iter_init (observer->callers, &iter);
      while (_dbus_hash_iter_next (&iter))
        _dbus_hash_iter_remove_entry (&iter);
    }

  observer->open = open;
  return TRUE;
}

/* Shows the monitors stock's NoReply error to @call, which its callee
 * never answered */
static void
show_no_reply (BusMcastObserver *observer,
               Call             *call)
{
  DBusConnection *caller = bus_mcast_owner_of (bus_context_get_registry (observer->context), call->caller);
  DBusMessage *error;

  if (caller == NULL)
    return; /* the caller left too: stock drops the call */

  /* The daemon sends nothing without showing it: it waits for memory,
   * as for its own member's packets (read_one()) */
  while ((error = _dbus_mcast_no_reply_new (call->caller, call->serial)) == NULL)
    _dbus_wait_for_memory ();

  while (!show_monitors (observer, NULL, caller, error))
    _dbus_wait_for_memory ();
  dbus_message_unref (error);
}

void
bus_mcast_observer_departed (BusMcastObserver *observer,
                             const char       *name)
{
  Callee *callee;
  DBusList *link;

  if (observer == NULL)
    return;

  callee = _dbus_hash_table_lookup_string (observer->callees, name);
  if (callee == NULL)
    return;

  /* Newest first, as stock's expire list sends them */
  while ((link = _dbus_list_get_last_link (&callee->calls)) != NULL)
    {
      show_no_reply (observer, link->data);
      call_remove (observer, callee, link);
    }

  _dbus_hash_table_remove_string (observer->callees, name);
}
