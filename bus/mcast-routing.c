/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-routing.c  What dbus-daemon still routes for members of the
 *                  multicast group, and what it must not route again
 *
 * See mcast-routing.h for what this module is for.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * Licensed under the Academic Free License version 2.1 or the GNU General
 * Public License version 2 or later, like the rest of dbus.
 */

#include <config.h>
#include "mcast-routing.h"

#include <stdint.h>

#include <dbus/dbus-message-internal.h>
#include <dbus/dbus-seqpacket-io.h>
#include <dbus/dbus-sysdeps.h>
#include "connection.h"
#include "mcast-members.h"

#define MCAST_INTERFACE "org.freedesktop.DBus.Mcast"

/* How a message from a member reached the daemon, in a message data slot. */
typedef enum
{
  ARRIVED_FROM_GROUP = 1,
  ARRIVED_STRAIGHT
} Arrival;

static dbus_int32_t arrival_slot = -1;
static BusMcastRoutingStats stats;

dbus_bool_t
bus_mcast_routing_init (void)
{
  return dbus_message_allocate_data_slot (&arrival_slot);
}

void
bus_mcast_routing_deinit (void)
{
  dbus_message_free_data_slot (&arrival_slot);
}

static Arrival
arrival_of (DBusMessage *message)
{
  return (Arrival) (uintptr_t) dbus_message_get_data (message, arrival_slot);
}

dbus_bool_t
bus_mcast_routing_received (DBusConnection *sender,
                            DBusMessage    *message)
{
  const DBusString *header, *body;
  Arrival arrival;

  stats.dispatched += 1;
  if (!bus_mcast_members_is_member (sender))
    return TRUE;

  /* The sender's libdbus sends with MSG_DONTROUTE exactly the messages
   * the group cannot carry.  A member that sends anything else that way
   * only has it routed as if it came from the group: to non-members. */
  _dbus_message_get_network_data (message, &header, &body);
  if (dbus_message_contains_unix_fds (message) ||
      _dbus_string_get_length (header) + _dbus_string_get_length (body) >
      DBUS_SEQPACKET_FRAGMENT_SIZE)
    arrival = ARRIVED_STRAIGHT;
  else
    arrival = ARRIVED_FROM_GROUP;

  if (arrival == ARRIVED_STRAIGHT)
    stats.straight += 1;
  else
    stats.from_group += 1;

  return dbus_message_set_data (message, arrival_slot,
                                (void *) (uintptr_t) arrival, NULL);
}

dbus_bool_t
bus_mcast_routing_delivered_by_kernel (DBusConnection *recipient,
                                       DBusMessage    *message)
{
  return arrival_of (message) == ARRIVED_FROM_GROUP &&
         bus_mcast_members_is_member (recipient);
}

void
bus_mcast_routing_get_stats (BusMcastRoutingStats *out)
{
  *out = stats;
}

void
bus_mcast_routing_hand_over (DBusMessage *message)
{
  /* The message waits for a service to be activated, which no member's
   * filter could pass at the time it was sent: the daemon delivers it. */
  if (arrival_of (message) == ARRIVED_FROM_GROUP)
    dbus_message_set_data (message, arrival_slot, NULL, NULL);
}

void
bus_mcast_routing_fence (DBusConnection *sender,
                         DBusMessage    *message)
{
  DBusMessage *fence;
  dbus_uint32_t serial;

  if (arrival_of (message) != ARRIVED_STRAIGHT ||
      !dbus_connection_get_is_connected (sender))
    return;

  serial = dbus_message_get_serial (message);

  /* The sender writes nothing until the fence arrives: wait for memory
   * rather than leave it stuck. */
  while ((fence = dbus_message_new_signal (DBUS_PATH_DBUS, MCAST_INTERFACE,
                                           "Routed")) == NULL ||
         !dbus_message_set_sender (fence, DBUS_SERVICE_DBUS) ||
         !dbus_message_set_destination (fence,
                                        bus_connection_get_name (sender)) ||
         !dbus_message_append_args (fence, DBUS_TYPE_UINT32, &serial,
                                    DBUS_TYPE_INVALID) ||
         !dbus_connection_send (sender, fence, NULL))
    {
      if (fence != NULL)
        dbus_message_unref (fence);
      _dbus_wait_for_memory ();
    }

  dbus_message_unref (fence);
}
