/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-routing.c  What dbus-daemon still routes for members of the
 *                  multicast group, and what it must not route again
 *
 * See mcast-routing.h for what this module is for.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "mcast-routing.h"

#include <stdint.h>
#include <string.h>

#include <dbus/dbus-connection-internal.h>
#include <dbus/dbus-list.h>
#include <dbus/dbus-mcast-member.h>
#include <dbus/dbus-message-internal.h>
#include <dbus/dbus-seqpacket-io.h>
#include <dbus/dbus-sysdeps.h>
#include <dbus/dbus-timeout.h>
#include "connection.h"
#include "dispatch.h"
#include "mcast-members.h"
#include "mcast-observer.h"
#include "mcast-spill.h"
#include "services.h"
#include "utils.h"

/* How a message from a member reached the daemon, in a message data slot. */
typedef enum
{
  ARRIVED_FROM_GROUP = 1,
  ARRIVED_STRAIGHT,
  ARRIVED_STRAIGHT_TO_START,   /**< straight, waiting for the service it
                                    starts: its sender need not wait */
  ARRIVED_OBSERVED,            /**< read by the daemon's own member */
  ARRIVED_OVER_REPLY_LIMIT     /**< straight, a call its sender's libdbus
                                    found over the reply limit */
} Arrival;

/* A fence owed to a member, in a second message data slot of the message
 * it sent straight: due when the daemon lets go of that message. */
typedef struct
{
  BusMcastRouting *routing;
  DBusConnection *sender;      /**< referenced */
  dbus_uint32_t serial;        /**< of the routed message */
} Fence;

/* A member left: every other member that may await its reply is owed a
 * Departed signal, sent from the main loop, after the NameOwnerChanged
 * signals of its names, as stock's NoReply errors are.  One signal tells
 * of all the members that left since the last one. */
typedef struct
{
  BusMcastMembers *members;
  BusMcastObserver *observer;
  char *name;                  /**< its unique name */
} Departure;

/* A member's message from the group's copy queue, waiting to be
 * dispatched in the order the group delivered it */
typedef struct
{
  dbus_uint64_t sender_id;     /**< the kernel's id of its sender */
  DBusMessage *message;        /**< NULL: the packet held no valid message */
} Copy;

struct BusMcastRouting
{
  BusContext *context;
  DBusLoop *loop;
  DBusTimeout *send_fences;    /**< enabled while fences are due */
  DBusTimeout *send_departures; /**< enabled while departures are due */
  DBusTimeout *route_copies;   /**< enabled while copies wait for no event */
  DBusList *due;               /**< Fence *, in the order they fell due */
  DBusList *departures;        /**< Departure *, in the order members left */
  DBusList *copies;            /**< Copy *, in the group's order */
  dbus_bool_t routing_copies;  /**< dispatching them: do not start again */
  /** bus_dispatch_group_copy() is dispatching a copy: the message came
   * from the group, not straight from its sender's connection */
  dbus_bool_t dispatching_copy;
  /** The largest reply limit members were told: at most how many calls
   * a member awaits, and so how many NoReply errors it may make in a
   * Departed signal's place */
  dbus_uint32_t largest_reply_limit;
  BusMcastRoutingStats stats;
};

/* The Departed signal, without destination, and how many serials each
 * member's copy takes: its own, and one for each NoReply error the
 * member's libdbus may number after it (dbus-mcast-member.h); the
 * departed members' kernel ids */
typedef struct
{
  DBusMessage *signal;
  dbus_uint32_t serials;
  BusMcastObserver *observer;
  dbus_uint64_t *ids;
  int n_ids;
} Departed;

/* How long the daemon gathers departures into one Departed signal: when
 * N members leave together (a logout), each member gets a signal per
 * DEPARTURES_DELAY_MS rather than one per departure.  What a caller
 * waits for its NoReply errors. */
#define DEPARTURES_DELAY_MS 5

static dbus_int32_t arrival_slot = -1;
static dbus_int32_t fence_slot = -1;
/* A copy from the group addressed to a name: the group's commits when it
 * was sent, plus one (0 is no data) */
static dbus_int32_t commits_slot = -1;

static Arrival
arrival_of (DBusMessage *message)
{
  return (Arrival) (uintptr_t) dbus_message_get_data (message, arrival_slot);
}

/* Whether @message is a copy from the group addressed to a name, and how
 * many UNIX_GROUP_COMMITs the group had made when it was sent: the kernel
 * filtered it with the programs of that commit */
static dbus_bool_t
commits_of (DBusMessage   *message,
            dbus_uint32_t *commits)
{
  uintptr_t data = (uintptr_t) dbus_message_get_data (message, commits_slot);

  if (data == 0)
    return FALSE;

  *commits = (dbus_uint32_t) (data - 1);
  return TRUE;
}

/* Whether the member that sent @message, which arrived as @arrival,
 * waits for its fence: it came straight, or it is a call to the bus
 * driver that changes what the daemon routes (_dbus_mcast_is_fenced()) */
static dbus_bool_t
waits_for_fence (Arrival      arrival,
                 DBusMessage *message)
{
  return arrival == ARRIVED_STRAIGHT || arrival == ARRIVED_STRAIGHT_TO_START ||
         arrival == ARRIVED_OVER_REPLY_LIMIT ||
         (arrival == ARRIVED_FROM_GROUP && _dbus_mcast_is_fenced (message));
}

static dbus_bool_t
is_fenced (DBusMessage *message)
{
  return waits_for_fence (arrival_of (message), message);
}

DBusMessage *
bus_mcast_routing_new_signal (DBusConnection *recipient,
                              const char     *member,
                              dbus_uint32_t   argument)
{
  DBusMessage *signal;

  signal = _dbus_mcast_daemon_signal_new (member);
  if (signal == NULL)
    return NULL;

  if (dbus_message_set_destination (signal,
                                    bus_connection_get_name (recipient)) &&
      dbus_message_append_args (signal, DBUS_TYPE_UINT32, &argument,
                                DBUS_TYPE_INVALID))
    return signal;

  dbus_message_unref (signal);
  return NULL;
}

static void
send_fence (Fence *fence)
{
  DBusMessage *signal;

  if (!dbus_connection_get_is_connected (fence->sender))
    return;

  /* The sender writes nothing until its fence arrives: wait for memory
   * rather than leave it stuck. */
  while ((signal = bus_mcast_routing_new_signal (fence->sender,
                                                 DBUS_MCAST_ROUTED,
                                                 fence->serial)) == NULL ||
         !dbus_connection_send (fence->sender, signal, NULL))
    {
      if (signal != NULL)
        dbus_message_unref (signal);
      _dbus_wait_for_memory ();
    }

  dbus_message_unref (signal);
}

/* Sends the fence for @message, which @sender sent, at once */
static void
send_fence_now (BusMcastRouting *routing,
                DBusConnection  *sender,
                DBusMessage     *message)
{
  Fence now = { routing, sender, dbus_message_get_serial (message) };

  send_fence (&now);
}

static void
fence_free (Fence *fence)
{
  dbus_connection_unref (fence->sender);
  dbus_free (fence);
}

static void
copy_free (Copy *copy)
{
  if (copy->message != NULL)
    dbus_message_unref (copy->message);
  dbus_free (copy);
}

static void
departure_free (Departure *departure)
{
  dbus_free (departure->name);
  dbus_free (departure);
}

/* The Departed signal for @departures, without destination.  NULL if no
 * memory. */
static DBusMessage *
new_departed (DBusList *departures)
{
  DBusMessage *signal;
  const char **names;
  DBusList *link;
  int n = 0;

  names = dbus_new (const char *, _dbus_list_get_length (&departures));
  if (names == NULL)
    return NULL;

  for (link = _dbus_list_get_first_link (&departures);
       link != NULL;
       link = _dbus_list_get_next_link (&departures, link))
    names[n++] = ((Departure *) link->data)->name;

  signal = _dbus_mcast_departed_new (names, n);
  dbus_free (names);
  return signal;
}

/* Sends @data, the Departed, to the member @connection if its table of
 * calls lists one that a departed member may have received (monitors
 * make no calls), behind the group copies the kernel diverted from it so
 * far, which may hold the departed members' last messages.  Its serial
 * is the first of a block the connection numbers nothing else with. */
static void
send_departed (DBusConnection *connection,
               void           *data)
{
  Departed *departed = data;
  DBusMessage *signal;

  if (bus_connection_is_monitor (connection) ||
      !bus_mcast_observer_awaits (departed->observer, connection,
                                  departed->ids, departed->n_ids))
    return;

  while ((signal = dbus_message_copy (departed->signal)) == NULL ||
         !dbus_message_set_destination (signal,
                                        bus_connection_get_name (connection)))
    {
      if (signal != NULL)
        dbus_message_unref (signal);
      _dbus_wait_for_memory ();
    }
  dbus_message_set_serial (signal,
                           _dbus_connection_get_next_client_serials (
                               connection, departed->serials));

  bus_mcast_spill_send_behind (
      bus_context_get_mcast_spill (bus_connection_get_context (connection)),
      connection, signal);
  dbus_message_unref (signal);
}

static dbus_bool_t
send_due_fences (void *data)
{
  BusMcastRouting *routing = data;
  Fence *fence;

  while ((fence = _dbus_list_pop_first (&routing->due)) != NULL)
    {
      send_fence (fence);
      fence_free (fence);
    }

  _dbus_timeout_disable (routing->send_fences);
  return TRUE;
}

static dbus_bool_t
send_due_departures (void *data)
{
  BusMcastRouting *routing = data;
  Departure *departure;
  Departed departed;
  DBusList *link;

  _dbus_timeout_disable (routing->send_departures);
  if (routing->departures == NULL)
    return TRUE;

  /* Without it members would wait for replies until their own timeouts:
   * wait for memory, as the daemon does for the departures'
   * NameOwnerChanged */
  while ((departed.signal = new_departed (routing->departures)) == NULL)
    _dbus_wait_for_memory ();
  departed.serials = routing->largest_reply_limit < _DBUS_UINT32_MAX ?
                     routing->largest_reply_limit + 1 : _DBUS_UINT32_MAX;
  departed.n_ids = 0;
  while ((departed.ids = dbus_new (dbus_uint64_t,
                                   _dbus_list_get_length (&routing->departures))) == NULL)
    _dbus_wait_for_memory ();
  for (link = _dbus_list_get_first_link (&routing->departures);
       link != NULL;
       link = _dbus_list_get_next_link (&routing->departures, link))
    departed.ids[departed.n_ids++] =
        _dbus_mcast_sender_id_of_name (((Departure *) link->data)->name);

  /* Monitors see stock's errors, members make their own */
  for (link = _dbus_list_get_first_link (&routing->departures);
       link != NULL;
       link = _dbus_list_get_next_link (&routing->departures, link))
    {
      departure = link->data;
      bus_mcast_observer_departed (departure->observer, departure->name);
    }

  departure = _dbus_list_get_first (&routing->departures);
  departed.observer = departure->observer;
  bus_mcast_members_foreach (departure->members, send_departed, &departed);
  dbus_message_unref (departed.signal);
  dbus_free (departed.ids);
  while ((departure = _dbus_list_pop_first (&routing->departures)) != NULL)
    departure_free (departure);
  return TRUE;
}

/* Copies a drain took while a transaction was going out (monitors are
 * connected) wait in the list: the copy queue may have nothing more to
 * wake the main loop with */
static dbus_bool_t
route_due_copies (void *data)
{
  BusMcastRouting *routing = data;

  _dbus_timeout_disable (routing->route_copies);
  bus_mcast_routing_route_copies (routing);
  return TRUE;
}

/* A disabled timeout of @loop that calls @function */
static DBusTimeout *
add_timeout (DBusLoop               *loop,
             int                     interval,
             DBusTimeoutHandler      function,
             BusMcastRouting        *routing)
{
  DBusTimeout *timeout = _dbus_timeout_new (interval, function, routing, NULL);

  if (timeout == NULL)
    return NULL;

  _dbus_timeout_disable (timeout);
  if (!_dbus_loop_add_timeout (loop, timeout))
    {
      _dbus_timeout_unref (timeout);
      return NULL;
    }

  return timeout;
}

static void
remove_timeout (DBusLoop    *loop,
                DBusTimeout *timeout)
{
  if (timeout == NULL)
    return;

  _dbus_loop_remove_timeout (loop, timeout);
  _dbus_timeout_unref (timeout);
}

/* The free function of fence_slot: every recipient's copy of the message
 * is written, or dropped with its connection. */
static void
fence_due (void *data)
{
  Fence *fence = data;

  if (_dbus_list_append (&fence->routing->due, fence))
    {
      _dbus_timeout_restart (fence->routing->send_fences, 0);
      return;
    }

  /* No memory to defer it: send it now, as early as it may go. */
  send_fence (fence);
  fence_free (fence);
}

BusMcastRouting *
bus_mcast_routing_new (BusContext *context)
{
  DBusLoop *loop = bus_context_get_loop (context);
  BusMcastRouting *routing;

  routing = dbus_new0 (BusMcastRouting, 1);
  if (routing == NULL)
    return NULL;

  routing->context = context;
  routing->loop = loop;
  routing->send_fences = add_timeout (loop, 0, send_due_fences, routing);
  routing->send_departures = add_timeout (loop, DEPARTURES_DELAY_MS,
                                          send_due_departures, routing);
  routing->route_copies = add_timeout (loop, 0, route_due_copies, routing);
  if (routing->send_fences == NULL || routing->send_departures == NULL ||
      routing->route_copies == NULL)
    goto failed;

  if (!dbus_message_allocate_data_slot (&arrival_slot))
    goto failed;

  if (!dbus_message_allocate_data_slot (&fence_slot))
    {
      dbus_message_free_data_slot (&arrival_slot);
      goto failed;
    }

  if (!dbus_message_allocate_data_slot (&commits_slot))
    {
      dbus_message_free_data_slot (&fence_slot);
      dbus_message_free_data_slot (&arrival_slot);
      goto failed;
    }

  return routing;

 failed:
  remove_timeout (loop, routing->send_fences);
  remove_timeout (loop, routing->send_departures);
  remove_timeout (loop, routing->route_copies);
  dbus_free (routing);
  return NULL;
}

void
bus_mcast_routing_free (BusMcastRouting *routing)
{
  Departure *departure;
  Copy *copy;

  if (routing == NULL)
    return;

  /* The members are gone: nobody is owed a departure, nor a copy */
  while ((departure = _dbus_list_pop_first (&routing->departures)) != NULL)
    departure_free (departure);
  while ((copy = _dbus_list_pop_first (&routing->copies)) != NULL)
    copy_free (copy);

  send_due_fences (routing);
  remove_timeout (routing->loop, routing->send_fences);
  remove_timeout (routing->loop, routing->send_departures);
  remove_timeout (routing->loop, routing->route_copies);
  dbus_message_free_data_slot (&commits_slot);
  dbus_message_free_data_slot (&fence_slot);
  dbus_message_free_data_slot (&arrival_slot);
  dbus_free (routing);
}

void
bus_mcast_routing_take_copy (BusMcastRouting  *routing,
                             dbus_uint64_t     sender_id,
                             dbus_uint32_t     commits,
                             const DBusString *packet,
                             int               len)
{
  const char *data = _dbus_string_get_const_data_len (packet, 0, len);
  DBusError error = DBUS_ERROR_INIT;
  DBusList *link = NULL;
  Copy *copy;

  /* The kernel queued it for nobody else: wait for memory rather than
   * lose it */
  while ((copy = dbus_new0 (Copy, 1)) == NULL ||
         (link = _dbus_list_alloc_link (copy)) == NULL)
    {
      dbus_free (copy);
      _dbus_wait_for_memory ();
    }
  copy->sender_id = sender_id;

  /* One whole message in either byte order, as the loader of the
   * sender's connection would have taken it */
  if (dbus_message_demarshal_bytes_needed (data, len) == len)
    {
      while ((copy->message = dbus_message_demarshal (data, len, &error)) == NULL &&
             dbus_error_has_name (&error, DBUS_ERROR_NO_MEMORY))
        {
          dbus_error_free (&error);
          _dbus_wait_for_memory ();
        }
      dbus_error_free (&error);
    }

  if (copy->message != NULL &&
      dbus_message_get_destination (copy->message) != NULL)
    {
      while (!dbus_message_set_data (copy->message, commits_slot,
                                     (void *) (uintptr_t) ((uintptr_t) commits + 1),
                                     NULL))
        _dbus_wait_for_memory ();
    }

  _dbus_list_append_link (&routing->copies, link);
  if (!routing->routing_copies)
    _dbus_timeout_restart (routing->route_copies, 0);
}

/* The connection of the member with kernel id @sender_id, or NULL once it
 * has gone */
static DBusConnection *
member_of_id (BusMcastRouting *routing,
              dbus_uint64_t    sender_id)
{
  char name[DBUS_MCAST_SENDER_NAME_SIZE];

  _dbus_mcast_name_of_sender_id (sender_id, name);
  return bus_mcast_owner_of (bus_context_get_registry (routing->context), name);
}

void
bus_mcast_routing_route_copies (BusMcastRouting *routing)
{
  Copy *copy;

  /* Dispatching a copy comes back here (bus_dispatch_group_copy()) */
  if (routing->routing_copies)
    return;

  routing->routing_copies = TRUE;
  bus_mcast_observer_drain (bus_context_get_mcast_observer (routing->context));
  while ((copy = _dbus_list_pop_first (&routing->copies)) != NULL)
    {
      DBusConnection *sender = member_of_id (routing, copy->sender_id);

      /* A member that sends the group what is not one valid message has
       * corrupted its stream, as far as the daemon is concerned */
      if (sender != NULL && copy->message == NULL)
        dbus_connection_close (sender);
      else if (sender != NULL)
        {
          routing->dispatching_copy = TRUE;
          bus_dispatch_group_copy (sender, copy->message);
          routing->dispatching_copy = FALSE;
        }
      copy_free (copy);
    }
  routing->routing_copies = FALSE;
}

/* Strips @message, read from a member, of header fields the daemon does
 * not know, and sets *@group to whether it is one the group delivered to
 * members: it came from the copy queue (@copy) and the group can carry
 * it.  What a member sends with SCM_UNIX_DIRECT reached nobody else: the
 * daemon routes it to all, members on their connections, and fences it.
 * A copy with header fields the daemon does not know reached no member
 * (their filters drop it): it is routed to all, stripped.  FALSE if no
 * memory. */
static dbus_bool_t
strip (DBusMessage *message,
       dbus_bool_t  copy,
       dbus_bool_t *group)
{
  const DBusString *header, *body;
  dbus_bool_t carried;
  int length;

  carried = copy && _dbus_mcast_group_can_carry (message);
  _dbus_message_get_network_data (message, &header, &body);
  length = _dbus_string_get_length (header) + _dbus_string_get_length (body);
  if (!_dbus_message_remove_unknown_fields (message))
    return FALSE;

  _dbus_message_get_network_data (message, &header, &body);
  *group = carried &&
           _dbus_string_get_length (header) + _dbus_string_get_length (body) == length;
  return TRUE;
}

dbus_bool_t
bus_mcast_routing_received (BusMcastRouting *routing,
                            DBusConnection  *sender,
                            DBusMessage     *message)
{
  dbus_bool_t stripped, group;
  Arrival arrival;

  /* libdbus's own Disconnected signal was read from no client */
  if (dbus_message_has_interface (message, DBUS_INTERFACE_LOCAL))
    return TRUE;

  routing->stats.dispatched += 1;
  if (!bus_mcast_members_is_member (sender))
    return TRUE;

  /* Stripping allocates only to remove header fields the daemon does
   * not know, which make a message go straight */
  stripped = strip (message, routing->dispatching_copy, &group);
  if (!stripped)
    group = FALSE;

  if (_dbus_mcast_is_over_reply_limit (message))
    {
      /* Refused where the bus counts the replies it expects
       * (bus_mcast_routing_over_reply_limit()) */
      arrival = ARRIVED_OVER_REPLY_LIMIT;
      routing->stats.straight += 1;
    }
  else if (group)
    {
      arrival = ARRIVED_FROM_GROUP;
      routing->stats.from_group += 1;
    }
  else
    {
      arrival = ARRIVED_STRAIGHT;
      routing->stats.straight += 1;
    }

  if (!stripped ||
      !dbus_message_set_data (message, arrival_slot,
                              (void *) (uintptr_t) arrival, NULL))
    {
      /* Out of memory: the daemon answers the message with an error and
       * routes nothing, and bus_mcast_routing_fence() will not find the
       * mark.  A sender that waits for its fence gets it now, else it
       * would wait forever. */
      if (waits_for_fence (arrival, message))
        send_fence_now (routing, sender, message);
      return FALSE;
    }

  return TRUE;
}

dbus_bool_t
bus_mcast_routing_observed (DBusMessage *message)
{
  dbus_bool_t group;

  /* What the daemon would route as if it came straight, it shows its
   * monitors when it routes it */
  return arrival_slot >= 0 && strip (message, TRUE, &group) && group &&
         dbus_message_set_data (message, arrival_slot,
                                (void *) (uintptr_t) ARRIVED_OBSERVED, NULL);
}

/* Whether @recipient owns the well-known name @message is addressed to */
static dbus_bool_t
owns_destination (DBusConnection *recipient,
                  DBusMessage    *message)
{
  const char *destination = dbus_message_get_destination (message);

  return destination != NULL && destination[0] != ':' &&
         bus_mcast_owner_of (bus_connection_get_registry (recipient),
                             destination) == recipient;
}

dbus_bool_t
bus_mcast_routing_delivered_by_kernel (DBusConnection *recipient,
                                       DBusMessage    *message)
{
  dbus_uint32_t commits;
  Arrival arrival;

  if (arrival_slot < 0)
    return FALSE;

  /* The daemon's own member read it for the monitors the daemon serves
   * (mcast-observer.h); members got it from the group */
  arrival = arrival_of (message);
  if (arrival == ARRIVED_FROM_GROUP && bus_connection_is_monitor (recipient))
    return TRUE;

  /* Addressed to a name that moved since it was sent: the kernel
   * delivered it by name if a member owned the name then, whoever owns
   * it now (bus_mcast_members_owner_then()) */
  if (arrival == ARRIVED_FROM_GROUP && commits_of (message, &commits) &&
      owns_destination (recipient, message))
    {
      const char *other;

      return bus_mcast_members_owner_then (
          bus_context_get_mcast_members (bus_connection_get_context (recipient)),
          dbus_message_get_destination (message), commits, &other) ==
        BUS_MCAST_OWNER_MEMBER;
    }

  return (arrival == ARRIVED_FROM_GROUP || arrival == ARRIVED_OBSERVED) &&
         bus_mcast_members_gets_group_traffic (recipient);
}

dbus_bool_t
bus_mcast_routing_route_as_sent (BusTransaction *transaction,
                                 DBusConnection *sender,
                                 DBusMessage    *message,
                                 BusService    **service,
                                 DBusError      *error)
{
  BusContext *context = bus_connection_get_context (sender);
  const char *destination = dbus_message_get_destination (message);
  const char *other;
  dbus_uint32_t commits;
  DBusString name;

  /* A copy sent before a member took the name reached only us; the
   * sender's later messages to the name reached the member at once.
   * Stock reads the message before the sender's next one, while the
   * name was still where it stood when it was sent, which keeps the
   * order. */
  if (*service == NULL || arrival_slot < 0 ||
      arrival_of (message) != ARRIVED_FROM_GROUP ||
      !commits_of (message, &commits) ||
      destination[0] == ':')
    return TRUE;

  switch (bus_mcast_members_owner_then (bus_context_get_mcast_members (context),
                                        destination, commits, &other))
    {
    case BUS_MCAST_OWNER_NONE:
      /* Answered as to a name nobody owns, unless it may start a
       * service, which would then start again: stock would have held it
       * for the activation, and delivered it to the new owner */
      if (!dbus_message_get_auto_start (message) ||
          !bus_mcast_members_is_activatable (bus_context_get_mcast_members (context),
                                             destination))
        *service = NULL;
      return TRUE;

    case BUS_MCAST_OWNER_OTHER:
      if (other == NULL)
        return TRUE;
      break;

    case BUS_MCAST_OWNER_MEMBER:
    default:
      return TRUE;
    }

  /* A classic client owned it: it gets the message even if it has let
   * the name go since */
  _dbus_string_init_const (&name, other);
  *service = bus_registry_lookup (bus_connection_get_registry (sender), &name);
  if (*service != NULL)
    return TRUE;

  /* and if it has gone, stock would have answered a call to it with
   * NoReply when it left */
  if (!bus_transaction_capture (transaction, sender, NULL, message))
    {
      BUS_SET_OOM (error);
      return FALSE;
    }

  if (dbus_message_get_type (message) == DBUS_MESSAGE_TYPE_METHOD_CALL &&
      !dbus_message_get_no_reply (message))
    dbus_set_error_const (error, DBUS_ERROR_NO_REPLY, DBUS_MCAST_NO_REPLY_TEXT);
  return FALSE;
}

dbus_bool_t
bus_mcast_routing_over_reply_limit (DBusMessage *message)
{
  return arrival_slot >= 0 && arrival_of (message) == ARRIVED_OVER_REPLY_LIMIT;
}

void
bus_mcast_routing_hand_over (DBusMessage *message)
{
  /* The message waits for a service to be activated, which no member's
   * filter could pass at the time it was sent: the daemon delivers it. */
  if (arrival_of (message) == ARRIVED_FROM_GROUP)
    dbus_message_set_data (message, arrival_slot, NULL, NULL);

  /* Its sender need not wait for the service, as with stock: what it
   * sends the name next reaches the daemon, which queues it behind this
   * one for the activation, or, once a member has the name, comes
   * through the daemon behind this one (the new owner was diverted
   * before it got the name, and this one holds it when delivered) */
  if (arrival_of (message) == ARRIVED_STRAIGHT)
    dbus_message_set_data (message, arrival_slot,
                           (void *) (uintptr_t) ARRIVED_STRAIGHT_TO_START, NULL);
}

DBusMessage *
bus_mcast_routing_for_recipient (DBusConnection *recipient,
                                 DBusMessage    *message)
{
  DBusMessage *copy;

  if (!is_fenced (message))
    return dbus_message_ref (message);

  /* The copy keeps the sender's serial: dbus_message_copy() resets it,
   * and the recipient's connection would give it one of the daemon's */
  copy = dbus_message_copy (message);
  if (copy == NULL)
    return NULL;
  dbus_message_set_serial (copy, dbus_message_get_serial (message));

  /* Classic recipients get everything through the daemon, in order.  A
   * member's group copies wait behind this one at the daemon until it is
   * written, so the sender need not wait for it. */
  if (!bus_mcast_members_gets_group_traffic (recipient) ||
      bus_mcast_spill_hold (
          bus_context_get_mcast_spill (bus_connection_get_context (recipient)),
          recipient, copy))
    return copy;

  /* The kernel refused: the member shares the message, and the sender's
   * fence waits until it is written there too.  A monitor keeps its copy:
   * it must not hold any sender back. */
  if (bus_connection_is_monitor (recipient))
    return copy;

  dbus_message_unref (copy);
  return dbus_message_ref (message);
}

/* Moves the monitors among a transaction's @connections to the front, in
 * their order, without allocating */
void
bus_mcast_routing_execute_monitors_first (DBusList **connections)
{
  DBusList *link, *next, *monitors = NULL;

  for (link = _dbus_list_get_first_link (connections);
       link != NULL;
       link = next)
    {
      next = _dbus_list_get_next_link (connections, link);
      if (bus_connection_is_monitor (link->data))
        {
          _dbus_list_unlink (connections, link);
          _dbus_list_append_link (&monitors, link);
        }
    }

  while ((link = _dbus_list_get_last_link (&monitors)) != NULL)
    {
      _dbus_list_unlink (&monitors, link);
      _dbus_list_prepend_link (connections, link);
    }
}

void
bus_mcast_routing_fence (BusMcastRouting *routing,
                         DBusConnection  *sender,
                         DBusMessage     *message)
{
  Fence *fence;

  if (!is_fenced (message))
    return;

  if (arrival_of (message) == ARRIVED_STRAIGHT_TO_START)
    {
      send_fence_now (routing, sender, message);
      return;
    }

  fence = dbus_new0 (Fence, 1);
  if (fence != NULL)
    {
      fence->routing = routing;
      fence->sender = dbus_connection_ref (sender);
      fence->serial = dbus_message_get_serial (message);
      if (dbus_message_set_data (message, fence_slot, fence, fence_due))
        return;
      fence_free (fence);
    }

  /* Out of memory: do not leave the sender fenced forever. */
  send_fence_now (routing, sender, message);
}

void
bus_mcast_routing_departed (BusMcastRouting *routing,
                            BusMcastMembers *members,
                            DBusConnection  *connection)
{
  Departure *departure;

  if (bus_connection_get_name (connection) == NULL)
    return; /* it never had a name anyone could call */

  /* Without it members would wait for replies until their own timeouts:
   * wait for memory, as the daemon does for the departure's
   * NameOwnerChanged */
  while ((departure = dbus_new0 (Departure, 1)) == NULL)
    _dbus_wait_for_memory ();
  while ((departure->name = _dbus_strdup (bus_connection_get_name (connection))) == NULL)
    _dbus_wait_for_memory ();
  departure->members = members;
  departure->observer =
      bus_context_get_mcast_observer (bus_connection_get_context (connection));
  while (!_dbus_list_append (&routing->departures, departure))
    _dbus_wait_for_memory ();

  /* From the first departure on: the ones that follow within the delay
   * go into the same signal */
  if (!dbus_timeout_get_enabled (routing->send_departures))
    _dbus_timeout_restart (routing->send_departures, DEPARTURES_DELAY_MS);
}

void
bus_mcast_routing_told_reply_limit (BusMcastRouting *routing,
                                    dbus_uint32_t    limit)
{
  if (routing != NULL && limit > routing->largest_reply_limit)
    routing->largest_reply_limit = limit;
}

void
bus_mcast_routing_get_stats (BusMcastRouting      *routing,
                             BusMcastRoutingStats *stats)
{
  *stats = routing->stats;
}
