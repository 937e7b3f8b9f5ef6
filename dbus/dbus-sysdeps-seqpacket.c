/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-sysdeps-seqpacket.c  Unix SOCK_SEQPACKET sockets: connect and listen
 *
 * What this module is for: see dbus-sysdeps-seqpacket.h.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "dbus-sysdeps-seqpacket.h"
#include "dbus-sysdeps-unix.h"
#include "dbus-mcast-uapi.h"
#include "dbus-protocol.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
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
 * @param own #TRUE when the listening socket's owner connects to it: the
 *   socket is bound to an abstract name the kernel picks (autobind), by
 *   which the owner recognises the connection it accepts (getpeername()),
 *   and connect() fails with EAGAIN rather than wait for a full listen
 *   backlog, which only the owner itself would empty; #FALSE to wait
 *   then, like _dbus_connect_unix_socket()
 * @param error set on failure
 * @returns the connected non-blocking socket, or an invalid one on failure
 */
DBusSocket
_dbus_connect_unix_seqpacket (const char  *path,
                              dbus_bool_t  abstract,
                              dbus_bool_t  own,
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

  if (!open_socket (&fd, own ? SOCK_NONBLOCK : 0, error))
    return fd;

  if (own)
    {
      struct sockaddr_un autobind = { AF_UNIX };

      if (bind (fd.fd, (struct sockaddr *) &autobind, sizeof (sa_family_t)) < 0)
        {
          dbus_set_error (error, _dbus_error_from_errno (errno),
                          "Failed to bind a SOCK_SEQPACKET socket: %s",
                          _dbus_strerror (errno));
          _dbus_close_socket (fd, NULL);
          _dbus_socket_invalidate (&fd);
          return fd;
        }
    }

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

/* Binds fd to addr as a kernel multicast group (UNIX_CREATE_GROUP, which
 * binds like bind() and makes the socket a group).  Returns 1 if it is a
 * group now, 0 if the kernel has no multicast groups (the caller binds
 * instead), -1 with errno set on any other error. */
static int
create_group (DBusSocket                fd,
              const struct sockaddr_un *addr,
              socklen_t                 addr_len)
{
#ifdef DBUS_HAVE_MCAST_UAPI
  struct unix_mreq mreq;

  _DBUS_ZERO (mreq);
  memcpy (&mreq.address, addr, addr_len);
  mreq.address_len = addr_len;

  if (setsockopt (fd.fd, SOL_UNIX, UNIX_CREATE_GROUP, &mreq, sizeof (mreq)) == 0)
    return 1;

  /* A kernel without the feature: no SOL_UNIX options on AF_UNIX sockets
   * (EOPNOTSUPP), or no such option (ENOPROTOOPT) */
  if (errno == EOPNOTSUPP || errno == ENOPROTOOPT)
    return 0;

  return -1;
#else
  return 0;
#endif
}

/**
 * Creates a listening Unix SOCK_SEQPACKET socket.  Like
 * _dbus_listen_unix_socket(), a stale socket file at path is replaced and
 * the socket is made world-accessible (authentication is done in SASL).
 *
 * If the kernel has multicast AF_UNIX groups, the socket is created as a
 * group (UNIX_CREATE_GROUP instead of bind()), whose members the owner may
 * later admit (see dbus-server-seqpacket.h); otherwise it is bound as
 * usual.
 *
 * @param path the path or abstract name
 * @param abstract #TRUE for a Linux abstract name
 * @param is_group set to whether the socket is a multicast group
 * @param error set on failure
 * @returns the listening non-blocking socket, or an invalid one on failure
 */
DBusSocket
_dbus_listen_unix_seqpacket (const char  *path,
                             dbus_bool_t  abstract,
                             dbus_bool_t *is_group,
                             DBusError   *error)
{
  DBusSocket fd = DBUS_SOCKET_INIT;
  struct sockaddr_un addr;
  socklen_t addr_len;
  int group;

  _DBUS_ASSERT_ERROR_IS_CLEAR (error);

  *is_group = FALSE;
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

  group = create_group (fd, &addr, addr_len);
  if (group < 0)
    {
      dbus_set_error (error, _dbus_error_from_errno (errno),
                      "Failed to create multicast group at \"%s\": %s",
                      path, _dbus_strerror (errno));
      goto failed;
    }

  if (group == 0 && bind (fd.fd, (struct sockaddr *) &addr, addr_len) < 0)
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

  _dbus_verbose ("Listening on SOCK_SEQPACKET socket %s%s%s\n",
                 abstract ? "(abstract) " : "", path,
                 group ? " (multicast group)" : "");
  *is_group = group;
  return fd;

 failed:
  _dbus_close_socket (fd, NULL);
  _dbus_socket_invalidate (&fd);
  return fd;
}

/**
 * Whether the kernel could make this SOCK_SEQPACKET socket a member of a
 * multicast group that tells it who sent each message: getsockopt() of
 * UNIX_PASSID works only on a kernel with the multicast AF_UNIX feature.
 *
 * @param fd a SOCK_SEQPACKET socket
 * @returns #TRUE if the socket could be promoted
 */
dbus_bool_t
_dbus_seqpacket_mcast_supported (DBusSocket fd)
{
#ifdef DBUS_HAVE_MCAST_UAPI
  int value = 0;
  socklen_t len = sizeof (value);

  return getsockopt (fd.fd, SOL_UNIX, UNIX_PASSID, &value, &len) == 0;
#else
  return FALSE;
#endif
}

/**
 * Which member the last send of the member @fd was addressed to: the one
 * whose peer filter claimed it (UNIX_GROUP_SENT_TO).  A send the kernel
 * kept from the group (to the acceptor alone, or by the egress filter),
 * or that no member claimed, reached the daemon alone among those who
 * may answer it.
 *
 * @param fd a member's SOCK_SEQPACKET socket
 * @param id where to store the member's id, 0 unless it went to one
 * @returns where the send went
 */
DBusSeqpacketSent
_dbus_seqpacket_get_sent_to (DBusSocket     fd,
                             dbus_uint64_t *id)
{
#ifdef DBUS_HAVE_MCAST_UAPI
  socklen_t len = sizeof (*id);

  if (getsockopt (fd.fd, SOL_UNIX, UNIX_GROUP_SENT_TO, id, &len) == 0)
    return DBUS_SEQPACKET_SENT_TO_MEMBER;
  *id = 0;
  if (errno == ENODATA)
    return DBUS_SEQPACKET_SENT_TO_DAEMON;
#else
  *id = 0;
#endif
  return DBUS_SEQPACKET_SENT_UNKNOWN;
}

/**
 * How many messages a member sent, as the kernel counts them, and whom
 * the last one was addressed to (UNIX_GROUP_SENDS).
 *
 * @param fd a member's socket, or the daemon's end of its connection
 * @param count where to store the count
 * @param sent_to where to store the last send's addressee, 0 if none
 * @returns #FALSE if the kernel cannot tell
 */
dbus_bool_t
_dbus_seqpacket_get_sends (DBusSocket     fd,
                           dbus_uint64_t *count,
                           dbus_uint64_t *sent_to)
{
#ifdef DBUS_HAVE_MCAST_UAPI
  struct unix_sends sends;
  socklen_t len = sizeof (sends);

  if (getsockopt (fd.fd, SOL_UNIX, UNIX_GROUP_SENDS, &sends, &len) == 0)
    {
      *count = sends.count;
      *sent_to = sends.sent_to;
      return TRUE;
    }
#endif
  return FALSE;
}

/**
 * Asks the kernel to stamp every message this socket receives with the
 * sender id the group's acceptor gave the sender (SCM_UNIX_SENDER_ID, 0
 * for the acceptor itself).
 *
 * @param fd a SOCK_SEQPACKET socket
 * @param error set on failure
 * @returns #FALSE with error set on failure
 */
dbus_bool_t
_dbus_seqpacket_set_passid (DBusSocket  fd,
                            DBusError  *error)
{
#ifdef DBUS_HAVE_MCAST_UAPI
  int one = 1;

  if (setsockopt (fd.fd, SOL_UNIX, UNIX_PASSID, &one, sizeof (one)) == 0)
    return TRUE;

  dbus_set_error (error, _dbus_error_from_errno (errno),
                  "Failed to set UNIX_PASSID: %s", _dbus_strerror (errno));
#else
  dbus_set_error (error, DBUS_ERROR_NOT_SUPPORTED,
                  "Built without the multicast AF_UNIX interface");
#endif
  return FALSE;
}
