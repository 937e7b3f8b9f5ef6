/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-server-seqpacket.c  Server side of the "unixseq:" transport
 *
 * What this module is for: see dbus-server-seqpacket.h.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "dbus-server-seqpacket.h"
#include "dbus-server-socket.h"
#include "dbus-sysdeps-seqpacket.h"
#include "dbus-transport-seqpacket.h"
#include "dbus-address.h"
#include "dbus-internals.h"
#include "dbus-protocol.h"

#include <string.h>

/**
 * Listens on a new SOCK_SEQPACKET socket.  A socket file is removed when
 * the server disconnects.
 *
 * @param path the socket path or abstract name
 * @param abstract #TRUE for a Linux abstract name
 * @param error set on failure
 * @returns the server, or #NULL with error set
 */
DBusServer *
_dbus_server_new_for_seqpacket (const char  *path,
                                dbus_bool_t  abstract,
                                DBusError   *error)
{
  DBusServer *server = NULL;
  DBusSocket listen_fd;
  DBusString address;
  char *path_copy = NULL;
  dbus_bool_t is_group;

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

  if (!abstract)
    {
      path_copy = _dbus_strdup (path);
      if (path_copy == NULL)
        {
          _DBUS_SET_OOM (error);
          goto out;
        }
    }

  listen_fd = _dbus_listen_unix_seqpacket (path, abstract, &is_group, error);
  if (!_dbus_socket_is_valid (listen_fd))
    {
      _DBUS_ASSERT_ERROR_IS_SET (error);
      goto out;
    }

  server = _dbus_server_new_for_socket (&listen_fd, 1, &address, NULL, error);
  if (server == NULL)
    {
      _dbus_close_socket (listen_fd, NULL);
      goto out;
    }

  if (path_copy != NULL)
    {
      _dbus_server_socket_own_filename (server, path_copy);
      path_copy = NULL;
    }

  if (is_group)
    _dbus_server_socket_set_mcast_group (server);

 out:
  dbus_free (path_copy);
  _dbus_string_free (&address);
  return server;
}

/* dir: a fresh socket name in that directory */
static DBusServer *
new_in_directory (const char *dir,
                  DBusError  *error)
{
  DBusServer *server = NULL;
  DBusString full_path;
  DBusString filename;

  if (!_dbus_string_init (&full_path))
    {
      _DBUS_SET_OOM (error);
      return NULL;
    }

  if (!_dbus_string_init (&filename))
    {
      _dbus_string_free (&full_path);
      _DBUS_SET_OOM (error);
      return NULL;
    }

  if (!_dbus_string_append (&filename, "dbus-seq-"))
    {
      _DBUS_SET_OOM (error);
      goto out;
    }

  if (!_dbus_generate_random_ascii (&filename, 10, error))
    goto out;

  if (!_dbus_string_append (&full_path, dir) ||
      !_dbus_concat_dir_and_file (&full_path, &filename))
    {
      _DBUS_SET_OOM (error);
      goto out;
    }

  server = _dbus_server_new_for_seqpacket (_dbus_string_get_const_data (&full_path),
                                           FALSE, error);

 out:
  _dbus_string_free (&full_path);
  _dbus_string_free (&filename);
  return server;
}

/**
 * The listen_funcs entry of dbus-server.c for "unixseq:" addresses.
 *
 * @param entry the address entry
 * @param server_p where to return the server
 * @param error set on failure
 * @returns the outcome; DBUS_SERVER_LISTEN_NOT_HANDLED for other methods
 */
DBusServerListenResult
_dbus_server_listen_seqpacket (DBusAddressEntry  *entry,
                               DBusServer       **server_p,
                               DBusError         *error)
{
  const char *method;
  const char *path;
  const char *abstract;
  const char *dir;
  const char *tmpdir;

  *server_p = NULL;
  method = dbus_address_entry_get_method (entry);

  if (strcmp (method, DBUS_SEQPACKET_TRANSPORT_NAME) != 0)
    return DBUS_SERVER_LISTEN_NOT_HANDLED;

  path = dbus_address_entry_get_value (entry, "path");
  abstract = dbus_address_entry_get_value (entry, "abstract");
  dir = dbus_address_entry_get_value (entry, "dir");
  tmpdir = dbus_address_entry_get_value (entry, "tmpdir");

  if ((path != NULL) + (abstract != NULL) + (dir != NULL) + (tmpdir != NULL) != 1)
    {
      _dbus_set_bad_address (error, NULL, NULL,
                             "a unixseq: address needs exactly one of "
                             "\"path\", \"abstract\", \"dir\" and \"tmpdir\"");
      return DBUS_SERVER_LISTEN_BAD_ADDRESS;
    }

  if (path != NULL)
    *server_p = _dbus_server_new_for_seqpacket (path, FALSE, error);
  else if (abstract != NULL)
    *server_p = _dbus_server_new_for_seqpacket (abstract, TRUE, error);
  else
    *server_p = new_in_directory (dir != NULL ? dir : tmpdir, error);

  if (*server_p == NULL)
    {
      _DBUS_ASSERT_ERROR_IS_SET (error);
      return DBUS_SERVER_LISTEN_DID_NOT_CONNECT;
    }

  _DBUS_ASSERT_ERROR_IS_CLEAR (error);
  return DBUS_SERVER_LISTEN_OK;
}
