/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-admission.c  Which clients dbus-daemon promotes into the kernel
 *                    multicast group, and the promotion itself
 *
 * See mcast-admission.h for what this module is for.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "mcast-admission.h"

#include <errno.h>
#include <string.h>
#include <linux/filter.h>
#include <dbus/dbus-connection-internal.h>
#include <dbus/dbus-internals.h>
#include <dbus/dbus-mcast-member.h>
#include <dbus/dbus-mcast-uapi.h>
#include <dbus/dbus-seqpacket-io.h>
#include <dbus/dbus-sysdeps.h>
#include "apparmor.h"
#include "connection.h"
#include "mcast-observer.h"
#include "mcast-routing.h"
#include "mcast-spill.h"
#include "selinux.h"
#include "utils.h"

/* The ReplyLimit signal for @connection (dbus-mcast-member.h): the
 * bus's max_replies_per_connection, which the member's libdbus applies
 * to its calls to members.  NULL if no memory. */
static DBusMessage *
new_reply_limit (DBusConnection *connection)
{
  BusContext *context = bus_connection_get_context (connection);
  int limit = bus_context_get_max_replies_per_connection (context);
  dbus_uint32_t told = limit > 0 ? (dbus_uint32_t) limit : 0;

  bus_mcast_routing_told_reply_limit (bus_context_get_mcast_routing (context),
                                      told);
  return bus_mcast_routing_new_signal (connection, DBUS_MCAST_REPLY_LIMIT,
                                       told);
}

/* Sends member @connection the daemon's signal @signal, behind the
 * copies diverted from it so far */
static void
send_signal (DBusConnection *connection,
             DBusMessage    *signal)
{
  bus_mcast_spill_send_behind (
      bus_context_get_mcast_spill (bus_connection_get_context (connection)),
      connection, signal);
  dbus_message_unref (signal);
}

/* A reload may have changed the limit: every member is told again, as
 * it is told at its Hello */
static void
tell_reply_limit (DBusConnection *connection,
                  void           *data)
{
  DBusMessage *signal;

  if (bus_connection_is_monitor (connection))
    return; /* it may not call anyone */

  while ((signal = new_reply_limit (connection)) == NULL)
    _dbus_wait_for_memory ();
  send_signal (connection, signal);
}

void
bus_mcast_admission_configure (BusMcastMembers  *members,
                               BusMcastObserver *observer,
                               DBusList         *servers,
                               BusPolicy        *policy,
                               const BusLimits  *limits)
{
  /* A member sends a message of up to a packet through the group, where
   * nobody could refuse one over a smaller limit as stock does; calls
   * between members do not pass the daemon, which could not time them
   * out; and nobody asks AppArmor or SELinux about a group message */
  dbus_bool_t offered = bus_policy_can_be_filtered (policy) &&
                        limits->max_message_size >= DBUS_SEQPACKET_FRAGMENT_SIZE &&
                        limits->reply_timeout < 0 &&
                        !bus_apparmor_enabled () && !bus_selinux_enabled ();

  bus_mcast_observer_offer (observer, servers, offered);
  if (!offered)
    bus_mcast_members_close_all (members);
  else
    bus_mcast_members_foreach (members, tell_reply_limit, NULL);
}

#ifdef DBUS_HAVE_MCAST_UAPI

/* How every member is admitted: what it sends to its acceptor comes to us
 * too, and a member that stops reading holds nobody back, its copies
 * coming to us instead (mcast-spill.h).  A member that is no monitor also
 * gets what it sends itself (LOOPBACK): a call to its own name, its own
 * signal that one of its rules matches, as stock delivers them; its peer
 * filter decides as for any other copy.  A monitor does not: it may not
 * send, and stock disconnects it before anyone gets what it sent. */
#define ADMIT_FLAGS (UNIX_MREQ_SEND_TO_PEER | UNIX_MREQ_DIVERT_WHEN_FULL)

static dbus_bool_t
set_option (int          fd,
            int          option,
            const void  *value,
            socklen_t    len,
            const char  *what,
            DBusError   *error)
{
  if (setsockopt (fd, SOL_UNIX, option, value, len) == 0)
    return TRUE;

  dbus_set_error (error, _dbus_error_from_errno (errno),
                  "Could not %s: %s", what, _dbus_strerror (errno));
  return FALSE;
}

/* Admits @connection's peer with @flags.  Its budget for group copies in
 * the kernel is what the kernel holds for a client of stock dbus-daemon
 * that does not read: the daemon's writes wait in its socket's send buffer
 * (SO_SNDBUF) before its outgoing queue grows towards max_outgoing_bytes.
 * What does not fit is diverted to us and queued within that limit
 * (mcast-spill.h), so a member's caller gets LimitsExceeded where a
 * classic client's would. */
static dbus_bool_t
admit (DBusConnection *connection,
       unsigned int    flags,
       DBusError      *error)
{
  struct unix_accept_req req;
  socklen_t len = sizeof (int);
  int sndbuf;
  int fd;

  if (!dbus_connection_get_socket (connection, &fd))
    {
      dbus_set_error (error, DBUS_ERROR_DISCONNECTED,
                      "%s has no socket", bus_connection_get_name (connection));
      return FALSE;
    }

  if (getsockopt (fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) != 0)
    {
      dbus_set_error (error, _dbus_error_from_errno (errno),
                      "Could not read the send buffer size of %s: %s",
                      bus_connection_get_name (connection),
                      _dbus_strerror (errno));
      return FALSE;
    }

  memset (&req, 0, sizeof (req));
  req.flags = flags;
  req.rcvbuf = sndbuf > 0 ? (dbus_uint32_t) sndbuf : 0;
  return set_option (fd, UNIX_ACCEPT_GROUP, &req, sizeof (req),
                     "admit the client into the multicast group", error);
}

dbus_bool_t
bus_mcast_admission_admit (BusMcastMembers *members,
                           DBusConnection  *connection,
                           DBusError       *error)
{
  BusMcastObserver *observer =
      bus_context_get_mcast_observer (bus_connection_get_context (connection));
  DBusMessage *reply_limit, *calls = NULL;
  dbus_uint64_t id;
  int one = 1;
  int fd;

  if (!_dbus_connection_get_mcast_negotiated (connection))
    return TRUE;

  /* Agreed before a reload that made the bus stop offering: the client
   * waits for the reply as a member would, so it cannot stay */
  if (!bus_mcast_observer_offers (observer))
    {
      dbus_set_error (error, DBUS_ERROR_ACCESS_DENIED,
                      "The bus no longer promotes clients into the multicast group");
      return FALSE;
    }

  id = _dbus_mcast_sender_id_of_name (bus_connection_get_name (connection));
  if (id == 0 || !dbus_connection_get_socket (connection, &fd))
    {
      dbus_set_error (error, DBUS_ERROR_FAILED,
                      "Cannot admit %s into the multicast group",
                      bus_connection_get_name (connection));
      return FALSE;
    }

  /* Before the Hello reply: the member's first call may be counted */
  reply_limit = new_reply_limit (connection);
  if (reply_limit == NULL)
    {
      BUS_SET_OOM (error);
      return FALSE;
    }

  /* Where it lists its calls to members for monitors that come later;
   * a member that cannot take fds sends them through us */
  if (dbus_connection_can_send_type (connection, DBUS_TYPE_UNIX_FD))
    {
      calls = bus_mcast_observer_new_calls (observer, connection, error);
      if (calls == NULL)
        goto failed;
    }

  if (!set_option (fd, UNIX_PEER_ID, &id, sizeof (id),
                   "set the sender id", error) ||
      /* Diverted copies come with their senders' ids */
      !set_option (fd, UNIX_PASSID, &one, sizeof (one),
                   "receive the sender ids of diverted copies", error) ||
      !bus_mcast_members_add (members, connection, error))
    goto failed;

  if (!admit (connection, ADMIT_FLAGS | UNIX_MREQ_LOOPBACK, error))
    {
      bus_mcast_members_disconnected (members, connection);
      goto failed;
    }

  if (calls != NULL)
    send_signal (connection, calls);
  send_signal (connection, reply_limit);
  return TRUE;

 failed:
  if (calls != NULL)
    {
      dbus_message_unref (calls);
      bus_mcast_observer_forget_calls (observer, connection);
    }
  dbus_message_unref (reply_limit);
  return FALSE;
}

/* A monitor may not send: stock disconnects one that tries, before
 * anyone gets what it sent.  With @on, @connection's peer's egress filter
 * sends every group message of it to us alone (UNIX_PEER_EGRESS_FILTER),
 * where dispatch disconnects it as stock does; without, the filter goes. */
static dbus_bool_t
keep_from_group (DBusConnection *connection,
                 dbus_bool_t     on,
                 DBusError      *error)
{
  struct sock_filter to_us[] = { BPF_STMT (BPF_RET | BPF_K, 0) };
  struct sock_fprog prog = { 0, NULL };
  int fd;

  if (on)
    {
      prog.len = 1;
      prog.filter = to_us;
    }

  if (!dbus_connection_get_socket (connection, &fd))
    {
      dbus_set_error (error, DBUS_ERROR_DISCONNECTED,
                      "%s has no socket", bus_connection_get_name (connection));
      return FALSE;
    }

  return set_option (fd, UNIX_PEER_EGRESS_FILTER, &prog, sizeof (prog),
                     "keep a monitor's messages from the multicast group",
                     error);
}

dbus_bool_t
bus_mcast_admission_monitor (BusMcastMembers *members,
                             DBusConnection  *connection,
                             dbus_bool_t      selective,
                             DBusError       *error)
{
  dbus_bool_t member = _dbus_connection_get_mcast_negotiated (connection);

  /* The member's admission stays, with UNIX_MREQ_DIVERT_WHEN_FULL: a
   * monitor that stops reading already holds nobody back */
  if (member &&
      (!keep_from_group (connection, TRUE, error) ||
       !admit (connection, ADMIT_FLAGS, error)))
    goto failed;

  if (!bus_mcast_members_become_monitor (members, connection, selective,
                                         error))
    goto failed;

  return TRUE;

 failed:
  /* Back as it was (which fails only if the client has gone) */
  if (member)
    {
      admit (connection, ADMIT_FLAGS | UNIX_MREQ_LOOPBACK, NULL);
      keep_from_group (connection, FALSE, NULL);
    }
  return FALSE;
}

#else /* !DBUS_HAVE_MCAST_UAPI */

/* Built against kernel headers without the multicast UAPI: libdbus never
 * negotiates multicast then (dbus/dbus-mcast-uapi.h), so nobody is ever
 * admitted. */
dbus_bool_t
bus_mcast_admission_admit (BusMcastMembers *members,
                           DBusConnection  *connection,
                           DBusError       *error)
{
  return TRUE;
}

dbus_bool_t
bus_mcast_admission_monitor (BusMcastMembers *members,
                             DBusConnection  *connection,
                             dbus_bool_t      selective,
                             DBusError       *error)
{
  return bus_mcast_members_become_monitor (members, connection, selective,
                                           error);
}

#endif /* DBUS_HAVE_MCAST_UAPI */
