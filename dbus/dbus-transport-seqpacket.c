/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-transport-seqpacket.c  Client side of the "unixseq:" transport
 *
 * What this module is for: see dbus-transport-seqpacket.h.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "dbus-transport-seqpacket.h"
#include "dbus-transport-socket.h"
#include "dbus-sysdeps-seqpacket.h"
#include "dbus-address.h"
#include "dbus-internals.h"
#include "dbus-protocol.h"

#include <string.h>

/**
 * Appends the unixseq: address of a socket, as clients and servers
 * advertise it.
 *
 * @param address where to append
 * @param path the socket path or abstract name
 * @param abstract #TRUE for a Linux abstract name
 * @returns #FALSE if no memory
 */
dbus_bool_t
_dbus_seqpacket_append_address (DBusString  *address,
                                const char  *path,
                                dbus_bool_t  abstract)
{
  DBusString path_str;

  _dbus_string_init_const (&path_str, path);
  return _dbus_string_append (address, DBUS_SEQPACKET_TRANSPORT_NAME) &&
         _dbus_string_append (address, abstract ? ":abstract=" : ":path=") &&
         _dbus_address_append_escaped (address, &path_str);
}

/**
 * Connects to a SOCK_SEQPACKET socket and wraps it in a transport.
 *
 * @param path the socket path or abstract name
 * @param abstract #TRUE for a Linux abstract name
 * @param error set on failure
 * @returns the transport, or #NULL with error set
 */
DBusTransport *
_dbus_transport_new_for_seqpacket (const char  *path,
                                   dbus_bool_t  abstract,
                                   DBusError   *error)
{
  DBusSocket fd;
  DBusTransport *transport = NULL;
  DBusString address;

  _DBUS_ASSERT_ERROR_IS_CLEAR (error);

  if (!_dbus_string_init (&address))
    {
      _DBUS_SET_OOM (error);
      return NULL;
    }

  if (!_dbus_seqpacket_append_address (&address, path, abstract))
    {
      _DBUS_SET_OOM (error);
      goto out;
    }

  fd = _dbus_connect_unix_seqpacket (path, abstract, FALSE, error);
  if (!_dbus_socket_is_valid (fd))
    {
      _DBUS_ASSERT_ERROR_IS_SET (error);
      goto out;
    }

  _dbus_verbose ("Connected to SOCK_SEQPACKET socket %s\n", path);

  transport = _dbus_transport_new_for_socket (fd, NULL, &address);
  if (transport == NULL)
    {
      _DBUS_SET_OOM (error);
      _dbus_close_socket (fd, NULL);
    }

 out:
  _dbus_string_free (&address);
  return transport;
}

/**
 * The open_funcs entry of dbus-transport.c for "unixseq:" addresses.
 *
 * @param entry the address entry
 * @param transport_p where to return the transport
 * @param error set on failure
 * @returns the outcome; DBUS_TRANSPORT_OPEN_NOT_HANDLED for other methods
 */
DBusTransportOpenResult
_dbus_transport_open_seqpacket (DBusAddressEntry  *entry,
                                DBusTransport    **transport_p,
                                DBusError         *error)
{
  const char *method;
  const char *path;
  const char *abstract;

  method = dbus_address_entry_get_method (entry);
  _dbus_assert (method != NULL);

  if (strcmp (method, DBUS_SEQPACKET_TRANSPORT_NAME) != 0)
    {
      _DBUS_ASSERT_ERROR_IS_CLEAR (error);
      return DBUS_TRANSPORT_OPEN_NOT_HANDLED;
    }

  path = dbus_address_entry_get_value (entry, "path");
  abstract = dbus_address_entry_get_value (entry, "abstract");

  if ((path == NULL) == (abstract == NULL))
    {
      _dbus_set_bad_address (error, DBUS_SEQPACKET_TRANSPORT_NAME,
                             "path or abstract (exactly one)", NULL);
      return DBUS_TRANSPORT_OPEN_BAD_ADDRESS;
    }

  *transport_p = _dbus_transport_new_for_seqpacket (path != NULL ? path : abstract,
                                                    abstract != NULL, error);
  if (*transport_p == NULL)
    {
      _DBUS_ASSERT_ERROR_IS_SET (error);
      return DBUS_TRANSPORT_OPEN_DID_NOT_CONNECT;
    }

  _DBUS_ASSERT_ERROR_IS_CLEAR (error);
  return DBUS_TRANSPORT_OPEN_OK;
}
