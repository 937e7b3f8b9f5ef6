/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-sysdeps-seqpacket.c  Unix SOCK_SEQPACKET sockets: connect and listen
 *
 * What this module is for: see dbus-sysdeps-seqpacket.h.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * Licensed under the Academic Free License version 2.1 or the GNU General
 * Public License version 2 or later, like the rest of libdbus.
 */

#include <config.h>
#include "dbus-sysdeps-seqpacket.h"
#include "dbus-sysdeps-unix.h"
#include "dbus-protocol.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* As in dbus-sysdeps-unix.c: sun_path is 108 bytes on Linux but smaller
 * elsewhere; 99 is the portable limit (private there, so repeated). */
#define _DBUS_MAX_SUN_PATH_LENGTH 99

/* Fills addr for path; returns the address length, or 0 with error set */
static socklen_t
fill_address (struct sockaddr_un *addr,
              const char         *path,
              dbus_bool_t         abstract,
              DBusError          *error)
{
  size_t path_len = strlen (path);

  _DBUS_ZERO (*addr);
  addr->sun_family = AF_UNIX;

  if (abstract)
    {
#ifdef __linux__
      /* abstract names are not nul-terminated: sun_path[0] is the nul */
      path_len++;
      if (path_len > _DBUS_MAX_SUN_PATH_LENGTH)
        {
          dbus_set_error (error, DBUS_ERROR_BAD_ADDRESS,
                          "Abstract socket name too long");
          return 0;
        }
      memcpy (&addr->sun_path[1], path, path_len - 1);
#else
      dbus_set_error (error, DBUS_ERROR_NOT_SUPPORTED,
                      "Operating system does not support abstract socket namespace");
      return 0;
#endif
    }
  else
    {
      if (path_len > _DBUS_MAX_SUN_PATH_LENGTH)
        {
          dbus_set_error (error, DBUS_ERROR_BAD_ADDRESS,
                          "Socket name too long");
          return 0;
        }
      memcpy (addr->sun_path, path, path_len);
    }

  return _DBUS_STRUCT_OFFSET (struct sockaddr_un, sun_path) + path_len;
}

static dbus_bool_t
open_socket (DBusSocket *fd,
             int         flags,
             DBusError  *error)
{
  fd->fd = socket (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | flags, 0);
  if (fd->fd < 0)
    {
      dbus_set_error (error, _dbus_error_from_errno (errno),
                      "Failed to open SOCK_SEQPACKET socket: %s",
                      _dbus_strerror (errno));
      return FALSE;
    }
  return TRUE;
}

/**
 * Connects to a Unix SOCK_SEQPACKET socket.
 *
 * @param path the path or abstract name
 * @param abstract #TRUE for a Linux abstract name
 * @param error set on failure
 * @returns the connected non-blocking socket, or an invalid one on failure
 */
DBusSocket
_dbus_connect_unix_seqpacket (const char  *path,
                              dbus_bool_t  abstract,
                              DBusError   *error)
{
  DBusSocket fd = DBUS_SOCKET_INIT;
  struct sockaddr_un addr;
  socklen_t addr_len;
  int ret;

  _DBUS_ASSERT_ERROR_IS_CLEAR (error);

  addr_len = fill_address (&addr, path, abstract, error);
  if (addr_len == 0)
    return fd;

  /* Blocking connect() like _dbus_connect_unix_socket(): it waits while
   * the listen backlog is full instead of failing with EAGAIN. */
  if (!open_socket (&fd, 0, error))
    return fd;

  do
    ret = connect (fd.fd, (struct sockaddr *) &addr, addr_len);
  while (ret < 0 && errno == EINTR);

  if (ret < 0)
    {
      dbus_set_error (error, _dbus_error_from_errno (errno),
                      "Failed to connect to SOCK_SEQPACKET socket %s%s: %s",
                      abstract ? "(abstract) " : "", path,
                      _dbus_strerror (errno));
      _dbus_close_socket (fd, NULL);
      _dbus_socket_invalidate (&fd);
      return fd;
    }

  if (!_dbus_set_socket_nonblocking (fd, error))
    {
      _dbus_close_socket (fd, NULL);
      _dbus_socket_invalidate (&fd);
    }

  return fd;
}

/**
 * Creates a listening Unix SOCK_SEQPACKET socket.  Like
 * _dbus_listen_unix_socket(), a stale socket file at path is replaced and
 * the socket is made world-accessible (authentication is done in SASL).
 *
 * @param path the path or abstract name
 * @param abstract #TRUE for a Linux abstract name
 * @param error set on failure
 * @returns the listening non-blocking socket, or an invalid one on failure
 */
DBusSocket
_dbus_listen_unix_seqpacket (const char  *path,
                             dbus_bool_t  abstract,
                             DBusError   *error)
{
  DBusSocket fd = DBUS_SOCKET_INIT;
  struct sockaddr_un addr;
  socklen_t addr_len;

  _DBUS_ASSERT_ERROR_IS_CLEAR (error);

  addr_len = fill_address (&addr, path, abstract, error);
  if (addr_len == 0)
    return fd;

  if (!open_socket (&fd, SOCK_NONBLOCK, error))
    return fd;

  if (!abstract)
    {
      struct stat sb;

      if (stat (path, &sb) == 0 && S_ISSOCK (sb.st_mode))
        unlink (path);
    }

  if (bind (fd.fd, (struct sockaddr *) &addr, addr_len) < 0)
    {
      dbus_set_error (error, _dbus_error_from_errno (errno),
                      "Failed to bind SOCK_SEQPACKET socket \"%s\": %s",
                      path, _dbus_strerror (errno));
      goto failed;
    }

  if (listen (fd.fd, SOMAXCONN) < 0)
    {
      dbus_set_error (error, _dbus_error_from_errno (errno),
                      "Failed to listen on SOCK_SEQPACKET socket \"%s\": %s",
                      path, _dbus_strerror (errno));
      goto failed;
    }

  if (!abstract && chmod (path, 0777) < 0)
    _dbus_warn ("Could not set mode 0777 on socket %s", path);

  return fd;

 failed:
  _dbus_close_socket (fd, NULL);
  _dbus_socket_invalidate (&fd);
  return fd;
}
