/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-seqpacket-io.c  Packet I/O and framing for SOCK_SEQPACKET transports
 *
 * What this module is for: see dbus-seqpacket-io.h.  The socket transport
 * (dbus-transport-socket.c) calls these functions instead of its stream
 * reads and writes when its socket is a SOCK_SEQPACKET socket; nothing else
 * in the transport changes.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * Licensed under the Academic Free License version 2.1 or the GNU General
 * Public License version 2 or later, like the rest of libdbus.
 */

#include <config.h>
#include "dbus-seqpacket-io.h"
#include "dbus-marshal-basic.h"
#include "dbus-protocol.h"

#include <errno.h>
#include <string.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

struct DBusSeqpacketFraming
{
  /** Bytes of the current message still to come in further packets; 0
   * when the next packet must start a new message. */
  dbus_uint32_t remaining;
  /** Whether to log framing violations (server side: a misbehaving
   * client should be visible in the daemon's log) */
  dbus_bool_t log_violations;
};

/**
 * Creates the receive-side framing state of one connection.
 *
 * @param log_violations #TRUE to log framing violations as warnings
 *   (_dbus_log(), which the daemon sends to its log)
 * @returns the new state, or #NULL if no memory
 */
DBusSeqpacketFraming *
_dbus_seqpacket_framing_new (dbus_bool_t log_violations)
{
  DBusSeqpacketFraming *framing = dbus_new0 (DBusSeqpacketFraming, 1);

  if (framing != NULL)
    framing->log_violations = log_violations;

  return framing;
}

/**
 * Frees what _dbus_seqpacket_framing_new() returned.
 *
 * @param framing the state, or #NULL
 */
void
_dbus_seqpacket_framing_free (DBusSeqpacketFraming *framing)
{
  dbus_free (framing);
}

/**
 * Whether a socket is a SOCK_SEQPACKET socket.
 *
 * @param fd the socket
 * @returns #TRUE if it is
 */
dbus_bool_t
_dbus_socket_is_seqpacket (DBusSocket fd)
{
  int type = 0;
  socklen_t len = sizeof (type);

  if (getsockopt (fd.fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
    return FALSE;

  return type == SOCK_SEQPACKET;
}

/* Undoes a packet that cannot be delivered: closes the unix fds that came
 * with it (fds may be NULL), drops its bytes from buffer (they start at
 * start), and fails with error_number.  Returns -1 for the caller to
 * return. */
static int
discard_packet (DBusString   *buffer,
                int           start,
                int          *fds,
                unsigned int *n_fds,
                int           error_number)
{
  unsigned int i;

  if (fds != NULL)
    {
      for (i = 0; i < *n_fds; i++)
        close (fds[i]);
      *n_fds = 0;
    }
  _dbus_string_set_length (buffer, start);
  errno = error_number;
  return -1;
}

/* Appends exactly one packet of at most max_len bytes to buffer.  With
 * fds != NULL, receives up to *n_fds unix fds and sets *n_fds to the
 * number received.  Returns the packet length, 0 at end of stream, -1
 * with errno set on error (EPROTO: the packet is longer than max_len and
 * was discarded; ENOSPC: more fds than we have room for). */
static int
read_packet (DBusSocket    fd,
             DBusString   *buffer,
             int           max_len,
             int          *fds,
             unsigned int *n_fds)
{
  struct msghdr m;
  struct iovec iov;
  ssize_t size;
  ssize_t got;
  int start;
  unsigned int max_fds = 0;
  char *control = NULL;
  int saved_errno;

  if (fds != NULL)
    {
      max_fds = *n_fds;
      *n_fds = 0;
    }

 again:
  /* How long is the next packet?  MSG_TRUNC makes recv() return the
   * real length even though we read nothing. */
  size = recv (fd.fd, NULL, 0, MSG_PEEK | MSG_TRUNC);
  if (size < 0)
    {
      if (errno == EINTR)
        goto again;
      return -1;
    }

  if (size == 0)
    return 0; /* end of stream: our peers never send empty packets */

  if (size > max_len)
    {
      _dbus_verbose ("SOCK_SEQPACKET: discarding a %ld-byte packet (limit %d)\n",
                     (long) size, max_len);
      /* Drop it (attached fds are closed by the kernel) */
      (void) recv (fd.fd, NULL, 0, MSG_TRUNC);
      errno = EPROTO;
      return -1;
    }

  start = _dbus_string_get_length (buffer);
  if (!_dbus_string_lengthen (buffer, size))
    {
      errno = ENOMEM;
      return -1;
    }

  iov.iov_base = _dbus_string_get_data_len (buffer, start, size);
  iov.iov_len = size;
  _DBUS_ZERO (m);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;

  if (max_fds > 0)
    {
      m.msg_controllen = CMSG_SPACE (max_fds * sizeof (int));
      control = dbus_malloc0 (m.msg_controllen);
      if (control == NULL)
        {
          _dbus_string_set_length (buffer, start);
          errno = ENOMEM;
          return -1;
        }
      m.msg_control = control;
    }

 again_recv:
  got = recvmsg (fd.fd, &m, MSG_CMSG_CLOEXEC);
  if (got < 0)
    {
      if (errno == EINTR)
        goto again_recv;
      saved_errno = errno;
      dbus_free (control);
      _dbus_string_set_length (buffer, start);
      errno = saved_errno;
      return -1;
    }

  if (control != NULL)
    {
      struct cmsghdr *cm;

      for (cm = CMSG_FIRSTHDR (&m); cm != NULL; cm = CMSG_NXTHDR (&m, cm))
        {
          if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
            {
              unsigned int n = (cm->cmsg_len - CMSG_LEN (0)) / sizeof (int);
              unsigned int i;

              for (i = 0; i < n; i++)
                {
                  int received;

                  memcpy (&received, CMSG_DATA (cm) + i * sizeof (int),
                          sizeof (int));
                  if (*n_fds < max_fds)
                    fds[(*n_fds)++] = received;
                  else
                    close (received);
                }
            }
        }
      dbus_free (control);

      if (m.msg_flags & MSG_CTRUNC)
        {
          /* More fds than the loader has room for: the kernel closed the
           * rest, so this message cannot be delivered intact. */
          return discard_packet (buffer, start, fds, n_fds, ENOSPC);
        }
    }

  if (got != size || (m.msg_flags & MSG_TRUNC))
    return discard_packet (buffer, start, fds, n_fds, EPROTO);

  return got;
}

/**
 * Reads one packet of stream data (the SASL phase) and appends it to
 * buffer.
 *
 * @param fd the socket
 * @param buffer where to append the data
 * @returns bytes read, 0 at end of stream, -1 with errno set on error
 */
int
_dbus_seqpacket_read_stream (DBusSocket  fd,
                             DBusString *buffer)
{
  return read_packet (fd, buffer, DBUS_SEQPACKET_MAX_AUTH_PACKET, NULL, NULL);
}

/**
 * Writes stream data (the SASL phase) as one packet.  Like
 * _dbus_write_socket(), it may write less than asked (at most
 * #DBUS_SEQPACKET_MAX_AUTH_PACKET bytes).
 *
 * @param fd the socket
 * @param buffer the data
 * @param start first byte to write
 * @param len number of bytes to write
 * @returns bytes written or -1 with errno set
 */
int
_dbus_seqpacket_write_stream (DBusSocket        fd,
                              const DBusString *buffer,
                              int               start,
                              int               len)
{
  const char *data;
  ssize_t bytes;

  if (len > DBUS_SEQPACKET_MAX_AUTH_PACKET)
    len = DBUS_SEQPACKET_MAX_AUTH_PACKET;

  data = _dbus_string_get_const_data_len (buffer, start, len);

 again:
  bytes = send (fd.fd, data, len, MSG_NOSIGNAL);
  if (bytes < 0 && errno == EINTR)
    goto again;

  return bytes;
}

/* The total length of the message whose fixed header starts at p, or 0 if
 * that is not a plausible D-Bus header. */
static dbus_uint32_t
message_length (const unsigned char *p)
{
  int byte_order = p[0];
  dbus_uint32_t body_len;
  dbus_uint32_t fields_len;
  dbus_uint64_t total;

  if (byte_order != DBUS_LITTLE_ENDIAN && byte_order != DBUS_BIG_ENDIAN)
    return 0;

  body_len = _dbus_unpack_uint32 (byte_order, p + 4);
  fields_len = _dbus_unpack_uint32 (byte_order, p + 12);
  total = (dbus_uint64_t) DBUS_MINIMUM_HEADER_SIZE +
          _DBUS_ALIGN_VALUE ((dbus_uint64_t) fields_len, 8) + body_len;

  if (total > DBUS_MAXIMUM_MESSAGE_LENGTH)
    return 0;

  return (dbus_uint32_t) total;
}

static void
report_violation (DBusSeqpacketFraming *framing,
                  DBusSocket            fd,
                  const char           *violation,
                  int                   packet_len)
{
  struct ucred cred;
  socklen_t len = sizeof (cred);
  unsigned long pid = 0;

  _dbus_verbose ("SOCK_SEQPACKET framing violation: %s (%d-byte packet)\n",
                 violation, packet_len);

  if (!framing->log_violations)
    return;

  if (getsockopt (fd.fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
    pid = cred.pid;

  _dbus_log (DBUS_SYSTEM_LOG_WARNING,
             "Disconnecting SOCK_SEQPACKET peer (pid %lu): %s",
             pid, violation);
}

/**
 * Reads one packet of message data (after BEGIN) into buffer and checks
 * it against the framing rules of dbus-seqpacket-io.h.
 *
 * @param framing the connection's receive-side state
 * @param fd the socket
 * @param buffer the message loader's buffer
 * @param fds room for unix fds, or #NULL not to receive any
 * @param n_fds in: room in fds; out: number received
 * @returns bytes read, 0 at end of stream, -1 with errno set on error
 *   (EPROTO for a framing violation)
 */
int
_dbus_seqpacket_read_message (DBusSeqpacketFraming *framing,
                              DBusSocket            fd,
                              DBusString           *buffer,
                              int                  *fds,
                              unsigned int         *n_fds)
{
  int start = _dbus_string_get_length (buffer);
  int got;
  const unsigned char *packet;
  const char *violation = NULL;

  got = read_packet (fd, buffer, DBUS_SEQPACKET_FRAGMENT_SIZE, fds, n_fds);
  if (got < 0 && errno == EPROTO)
    {
      report_violation (framing, fd, "packet longer than the fragment size", -1);
      errno = EPROTO;
      return -1;
    }
  if (got <= 0)
    return got;

  packet = (const unsigned char *) _dbus_string_get_const_data_len (buffer, start, got);

  if (framing->remaining == 0)
    {
      dbus_uint32_t total;

      if (got < DBUS_MINIMUM_HEADER_SIZE)
        violation = "packet too short for a message header";
      else if ((total = message_length (packet)) == 0)
        violation = "invalid message header";
      else if ((dbus_uint32_t) got > total)
        violation = "packet holds more than one message";
      else if ((dbus_uint32_t) got < total && got != DBUS_SEQPACKET_FRAGMENT_SIZE)
        violation = "truncated message";
      else
        framing->remaining = total - got;
    }
  else
    {
      dbus_uint32_t expected = MIN (framing->remaining,
                                    DBUS_SEQPACKET_FRAGMENT_SIZE);

      if (fds != NULL && *n_fds > 0)
        violation = "unix fds attached to a continuation fragment";
      else if ((dbus_uint32_t) got != expected)
        violation = "fragment of the wrong length";
      else
        framing->remaining -= got;
    }

  if (violation != NULL)
    {
      report_violation (framing, fd, violation, got);
      return discard_packet (buffer, start, fds, n_fds, EPROTO);
    }

  return got;
}

/**
 * Writes the next packet of a message: the whole message if it is at most
 * #DBUS_SEQPACKET_FRAGMENT_SIZE bytes, else the next fragment of exactly
 * that size (or the rest).  Unix fds go with the first packet.  The write
 * is atomic: either the whole packet is sent or nothing (-1, EAGAIN).
 *
 * @param fd the socket
 * @param header the message header
 * @param body the message body
 * @param bytes_already_written bytes of header + body already sent
 * @param fds unix fds to attach when bytes_already_written is 0
 * @param n_fds how many
 * @returns bytes written or -1 with errno set
 */
int
_dbus_seqpacket_write_message (DBusSocket        fd,
                               const DBusString *header,
                               const DBusString *body,
                               int               bytes_already_written,
                               const int        *fds,
                               int               n_fds)
{
  int header_len = _dbus_string_get_length (header);
  int body_len = _dbus_string_get_length (body);
  int done = bytes_already_written;
  int want;
  int rest;
  struct iovec iov[2];
  struct msghdr m;
  char *control = NULL;
  ssize_t bytes;
  int saved_errno;
  dbus_bool_t raised_sndbuf = FALSE;

  _dbus_assert (done < header_len + body_len);

  want = MIN (header_len + body_len - done, DBUS_SEQPACKET_FRAGMENT_SIZE);
  rest = want;

  _DBUS_ZERO (m);
  m.msg_iov = iov;

  if (done < header_len)
    {
      int n = MIN (header_len - done, rest);

      iov[m.msg_iovlen].iov_base =
        (void *) _dbus_string_get_const_data_len (header, done, n);
      iov[m.msg_iovlen].iov_len = n;
      m.msg_iovlen++;
      rest -= n;
      done += n;
    }

  if (rest > 0)
    {
      iov[m.msg_iovlen].iov_base =
        (void *) _dbus_string_get_const_data_len (body, done - header_len, rest);
      iov[m.msg_iovlen].iov_len = rest;
      m.msg_iovlen++;
    }

  if (bytes_already_written == 0 && n_fds > 0)
    {
      struct cmsghdr *cm;

      m.msg_controllen = CMSG_SPACE (n_fds * sizeof (int));
      control = dbus_malloc0 (m.msg_controllen);
      if (control == NULL)
        {
          errno = ENOMEM;
          return -1;
        }
      m.msg_control = control;
      cm = CMSG_FIRSTHDR (&m);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN (n_fds * sizeof (int));
      memcpy (CMSG_DATA (cm), fds, n_fds * sizeof (int));
    }

 again:
  bytes = sendmsg (fd.fd, &m, MSG_NOSIGNAL);
  if (bytes < 0 && errno == EINTR)
    goto again;

  if (bytes < 0 && errno == EMSGSIZE && !raised_sndbuf)
    {
      /* The send buffer is smaller than one fragment (a small
       * net.core.wmem_default): raise it once, within wmem_max. */
      int size = 4 * DBUS_SEQPACKET_FRAGMENT_SIZE;

      raised_sndbuf = TRUE;
      if (setsockopt (fd.fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof (size)) == 0)
        goto again;
      errno = EMSGSIZE;
    }

  saved_errno = errno;
  dbus_free (control);

  if (bytes >= 0 && bytes != want)
    {
      /* Cannot happen on SOCK_SEQPACKET: sendmsg() is all or nothing */
      errno = EPROTO;
      return -1;
    }

  errno = saved_errno;
  return bytes;
}
