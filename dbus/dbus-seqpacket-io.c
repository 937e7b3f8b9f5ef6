/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-seqpacket-io.c  Packet I/O and framing for SOCK_SEQPACKET transports
 *
 * What this module is for: see dbus-seqpacket-io.h.  The socket transport
 * (dbus-transport-socket.c) calls these functions instead of its stream
 * reads and writes when its socket is a SOCK_SEQPACKET socket; nothing else
 * in the transport changes.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "dbus-seqpacket-io.h"
#include "dbus-list.h"
#include "dbus-marshal-basic.h"
#include "dbus-mcast-member.h"
#include "dbus-mcast-uapi.h"
#include "dbus-protocol.h"
#include "dbus-shared.h"
#include "dbus-sysdeps-seqpacket.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

struct DBusSeqpacketFraming
{
  /** Bytes of the current message still to come in further packets; 0
   * when the next packet must start a new message.  For a member: of the
   * current message from the daemon. */
  dbus_uint32_t remaining;
  /** The daemon's end of a connection: framing violations are logged (a
   * misbehaving client should be visible in the daemon's log), and the
   * kernel may divert copies of group messages to it */
  dbus_bool_t server;
  /** _dbus_seqpacket_framing_start() was called */
  dbus_bool_t started;
  /** Non-#NULL if this client negotiated multicast: every packet then
   * carries the kernel's sender id, and dbus-mcast-member.h decides */
  DBusMcastMember *member;
  /** For a member: the fragments so far of a long message from the
   * daemon, kept apart from the group's packets, which may arrive
   * between them */
  DBusString daemon_message;
  /** For a member: DeferredPacket from the group that arrived before the
   * Hello reply */
  DBusList *deferred;
  /** For a member: the message of the group packet just read, as its
   * check loaded it; for the daemon: a diverted copy or a group copy
   * just read.  _dbus_seqpacket_place_pending() queues it instead of the
   * bytes. */
  DBusMessage *checked;
  /** A packet read but not placed for lack of memory: its bytes stay in
   * the loader's buffer from pending_start on, which is neither parsed
   * nor read into until _dbus_seqpacket_place_pending() has placed them;
   * -1 if none */
  int pending_start;
  /** Length of the pending packet (for a long message from the daemon,
   * of the whole message) */
  int pending_len;
  /** Where the pending packet came from: .sender_id, the kernel id of
   * its sender (0 for the daemon); for the daemon, with .seq not 0, it is
   * that diverted copy */
  DBusSeqpacketDiverted pending_from;
  /** The daemon's end: the kernel sender id the message being written
   * goes out under (a diverted copy written back), or 0 */
  dbus_uint64_t forward_id;
  /** The last write found the socket full (EAGAIN): nothing is written
   * before poll() says it is writable again */
  dbus_bool_t write_blocked;
};

/* The message data slot holding a DBusSeqpacketDiverted */
static dbus_int32_t diverted_slot = -1;

/** A group packet kept until the Hello reply */
typedef struct
{
  dbus_uint64_t sender_id; /**< the kernel's sender id */
  int len;                 /**< length of data */
  char data[];             /**< the packet */
} DeferredPacket;

/**
 * Creates the receive-side framing state of one connection.
 *
 * @param server #TRUE for the daemon's end of a connection: framing
 *   violations are logged as warnings (_dbus_log(), which the daemon sends
 *   to its log), and diverted copies are read
 * @returns the new state, or #NULL if no memory
 */
DBusSeqpacketFraming *
_dbus_seqpacket_framing_new (dbus_bool_t server)
{
  DBusSeqpacketFraming *framing = dbus_new0 (DBusSeqpacketFraming, 1);

  if (framing != NULL)
    {
      framing->server = server;
      framing->pending_start = -1;
    }

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
  if (framing == NULL)
    return;

  if (framing->member != NULL)
    {
      _dbus_mcast_member_free (framing->member);
      _dbus_string_free (&framing->daemon_message);
      _dbus_list_clear_full (&framing->deferred, dbus_free);
    }
  if (framing->checked != NULL)
    dbus_message_unref (framing->checked);
  dbus_free (framing);
}

/**
 * Called once the connection is authenticated, before its first message
 * is read or written (calling it again does nothing).  A client that
 * negotiated multicast asks the kernel for sender ids (UNIX_PASSID) from
 * now on and follows dbus-mcast-member.h.
 *
 * @param framing the connection's state
 * @param fd the socket
 * @param multicast #TRUE if this is a client that negotiated multicast
 * @param error set on failure (the connection cannot go on)
 * @returns #FALSE with error set on failure
 */
dbus_bool_t
_dbus_seqpacket_framing_start (DBusSeqpacketFraming *framing,
                               DBusSocket            fd,
                               dbus_bool_t           multicast,
                               DBusError            *error)
{
  if (framing->started)
    return TRUE;

  if (multicast)
    {
      if (!_dbus_string_init (&framing->daemon_message))
        {
          _DBUS_SET_OOM (error);
          return FALSE;
        }

      framing->member = _dbus_mcast_member_new ();
      if (framing->member == NULL)
        {
          _dbus_string_free (&framing->daemon_message);
          _DBUS_SET_OOM (error);
          return FALSE;
        }

      if (!_dbus_seqpacket_set_passid (fd, error))
        {
          _dbus_mcast_member_free (framing->member);
          framing->member = NULL;
          _dbus_string_free (&framing->daemon_message);
          return FALSE;
        }
    }

  framing->started = TRUE;
  return TRUE;
}

/**
 * Whether the next message may be written now (not while a member waits
 * for a fence, see dbus-mcast-member.h).
 *
 * @param framing the connection's state
 * @returns #TRUE if it may
 */
dbus_bool_t
_dbus_seqpacket_may_write (DBusSeqpacketFraming *framing)
{
  return framing->member == NULL ||
         _dbus_mcast_member_may_write (framing->member);
}

/**
 * Whether the last write found the socket full.  A send then waits for
 * poll() to report the socket writable (the main loop's write watch, a
 * blocking flush) instead of trying again at once: on a busy bus that
 * would cost one failed system call per message queued.
 *
 * @param framing the connection's state
 * @returns #TRUE until _dbus_seqpacket_writable() is called
 */
dbus_bool_t
_dbus_seqpacket_write_blocked (DBusSeqpacketFraming *framing)
{
  return framing->write_blocked;
}

/**
 * Called when poll() reported the socket writable.
 *
 * @param framing the connection's state
 */
void
_dbus_seqpacket_writable (DBusSeqpacketFraming *framing)
{
  framing->write_blocked = FALSE;
}

/**
 * Called before the first packet of a message is written; a member
 * writes its unique name into SENDER here (so the message's length may
 * change) and decides how the message travels.
 *
 * @param framing the connection's state
 * @param message the locked message
 * @returns #FALSE if no memory (call again for the same message)
 */
dbus_bool_t
_dbus_seqpacket_prepare_message (DBusSeqpacketFraming *framing,
                                 DBusMessage          *message)
{
  const DBusSeqpacketDiverted *diverted;

  if (framing->member != NULL)
    return _dbus_mcast_member_prepare (framing->member, message);

  diverted = _dbus_seqpacket_message_get_diverted (message);
  framing->forward_id = diverted != NULL ? diverted->sender_id : 0;
  return TRUE;
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
 * number received.  With sender_id != NULL (a member), sets it to the
 * kernel's sender id of the packet.  With diverted != NULL (the daemon's
 * end), sets diverted->seq to the packet's divert sequence number, or to 0
 * if the kernel did not divert it, and diverted->sender_id to the id of
 * its sender.  Returns the packet length, 0 at end
 * of stream, -1 with errno set on error (EPROTO: the packet is longer
 * than max_len and was discarded, or has no sender id; ENOSPC: more fds
 * than we have room for).
 *
 * One recvmsg() per packet: buffer is lengthened by max_len first, so
 * the packet's length need not be asked for (recv (MSG_PEEK | MSG_TRUNC))
 * and a failed allocation leaves the packet in the socket.  The buffer's
 * allocation keeps that size between reads; the message loader compacts
 * it when it parses a message. */
static int
read_packet (DBusSocket     fd,
             DBusString    *buffer,
             int            max_len,
             int           *fds,
             unsigned int  *n_fds,
             dbus_uint64_t *sender_id,
             DBusSeqpacketDiverted *diverted,
             dbus_int64_t  *group_commits)
{
  struct msghdr m;
  struct iovec iov;
  ssize_t got;
  int start;
  unsigned int max_fds = 0;
  char *control = NULL;
  int saved_errno;
  dbus_bool_t have_id = FALSE;

  if (fds != NULL)
    {
      max_fds = *n_fds;
      *n_fds = 0;
    }

  start = _dbus_string_get_length (buffer);
  if (!_dbus_string_lengthen (buffer, max_len))
    {
      errno = ENOMEM;
      return -1;
    }

  iov.iov_base = _dbus_string_get_data_len (buffer, start, max_len);
  iov.iov_len = max_len;
  _DBUS_ZERO (m);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;

  if (max_fds > 0)
    m.msg_controllen = CMSG_SPACE (max_fds * sizeof (int));
#ifdef DBUS_HAVE_MCAST_UAPI
  if (sender_id != NULL || diverted != NULL)
    m.msg_controllen += CMSG_SPACE (sizeof (dbus_uint64_t));
  if (diverted != NULL)
    m.msg_controllen += CMSG_SPACE (sizeof (struct unix_delivery));
#endif
  if (diverted != NULL)
    diverted->seq = 0;

  if (m.msg_controllen > 0)
    {
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
  /* MSG_TRUNC: the packet's real length, even when longer than max_len */
  got = recvmsg (fd.fd, &m, MSG_CMSG_CLOEXEC | MSG_TRUNC);
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
#ifdef DBUS_HAVE_MCAST_UAPI
          if (cm->cmsg_level == SOL_UNIX && cm->cmsg_type == SCM_UNIX_SENDER_ID &&
              cm->cmsg_len == CMSG_LEN (sizeof (dbus_uint64_t)))
            {
              if (sender_id != NULL)
                memcpy (sender_id, CMSG_DATA (cm), sizeof (*sender_id));
              if (diverted != NULL)
                memcpy (&diverted->sender_id, CMSG_DATA (cm),
                        sizeof (diverted->sender_id));
              have_id = TRUE;
            }
          if (diverted != NULL &&
              cm->cmsg_level == SOL_UNIX && cm->cmsg_type == SCM_UNIX_DELIVERY &&
              cm->cmsg_len >= CMSG_LEN (sizeof (struct unix_delivery)))
            {
              struct unix_delivery delivery;

              memcpy (&delivery, CMSG_DATA (cm), sizeof (delivery));
              if (delivery.kind == UNIX_DELIVERY_DIVERTED)
                diverted->seq = delivery.seq;
              else if (delivery.kind == UNIX_DELIVERY_GROUP &&
                       group_commits != NULL)
                *group_commits = delivery.seq;
            }
#endif
          if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
            {
              unsigned int n = (cm->cmsg_len - CMSG_LEN (0)) / sizeof (int);
              unsigned int i;

              for (i = 0; i < n; i++)
                {
                  int received;

                  memcpy (&received, CMSG_DATA (cm) + i * sizeof (int),
                          sizeof (int));
                  if (fds != NULL && *n_fds < max_fds)
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

  if (got == 0)
    {
      /* End of stream: our peers never send empty packets */
      (void) discard_packet (buffer, start, fds, n_fds, 0);
      return 0;
    }

  if (got > max_len || (m.msg_flags & MSG_TRUNC))
    {
      /* The kernel dropped the rest of it (and closed fds beyond ours) */
      _dbus_verbose ("SOCK_SEQPACKET: discarding a %ld-byte packet (limit %d)\n",
                     (long) got, max_len);
      return discard_packet (buffer, start, fds, n_fds, EPROTO);
    }

  if (sender_id != NULL && !have_id)
    {
      /* UNIX_PASSID is set: the kernel stamps every packet */
      _dbus_verbose ("SOCK_SEQPACKET: packet without a sender id\n");
      return discard_packet (buffer, start, fds, n_fds, EPROTO);
    }

  _dbus_string_set_length (buffer, start + got);
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
  return read_packet (fd, buffer, DBUS_SEQPACKET_MAX_AUTH_PACKET,
                      NULL, NULL, NULL, NULL, NULL);
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

  if (!framing->server)
    return;

  if (getsockopt (fd.fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
    pid = cred.pid;

  _dbus_log (DBUS_SYSTEM_LOG_WARNING,
             "Disconnecting SOCK_SEQPACKET peer (pid %lu): %s",
             pid, violation);
}

/* Checks the packet that was just read against the framing rules of
 * dbus-seqpacket-io.h and advances framing->remaining; returns what is
 * wrong with it, or NULL. */
static const char *
check_framing (DBusSeqpacketFraming *framing,
               const unsigned char  *packet,
               int                   got,
               dbus_bool_t           has_fds)
{
  if (framing->remaining == 0)
    {
      dbus_uint32_t total;

      if (got < DBUS_MINIMUM_HEADER_SIZE)
        return "packet too short for a message header";
      if ((total = message_length (packet)) == 0)
        return "invalid message header";
      if ((dbus_uint32_t) got > total)
        return "packet holds more than one message";
      if ((dbus_uint32_t) got < total && got != DBUS_SEQPACKET_FRAGMENT_SIZE)
        return "truncated message";
      framing->remaining = total - got;
    }
  else
    {
      dbus_uint32_t expected = MIN (framing->remaining,
                                    DBUS_SEQPACKET_FRAGMENT_SIZE);

      if (has_fds)
        return "unix fds attached to a continuation fragment";
      if ((dbus_uint32_t) got != expected)
        return "fragment of the wrong length";
      framing->remaining -= got;
    }

  return NULL;
}

/* Leaves the packet at start in buffer, len bytes, where it is, to be
 * placed by _dbus_seqpacket_place_pending() once there is memory: what
 * ran out of memory changed nothing, and runs again then.  Stock libdbus
 * likewise keeps bytes it has no memory to load in its buffer. */
static void
keep_pending (DBusSeqpacketFraming        *framing,
              int                          start,
              int                          len,
              dbus_uint64_t                sender_id,
              const DBusSeqpacketDiverted *diverted)
{
  _dbus_verbose ("dbus-mcast: no memory to place a %d-byte packet, kept\n",
                 len);
  framing->pending_start = start;
  framing->pending_len = len;
  if (diverted != NULL)
    {
      framing->pending_from = *diverted;
    }
  else
    {
      framing->pending_from.seq = 0;
      framing->pending_from.sender_id = sender_id;
      framing->pending_from.invalid = FALSE;
    }
}

/* Whether group packets kept until the Hello reply are still to be
 * replayed (the replay ran out of memory) */
static dbus_bool_t
replay_owed (DBusSeqpacketFraming *framing)
{
  return framing->deferred != NULL &&
         !_dbus_mcast_member_waits_for_hello (framing->member);
}

/* Whether something read is not placed yet: nothing is read behind it */
static dbus_bool_t
unplaced (DBusSeqpacketFraming *framing)
{
  return framing->checked != NULL || framing->pending_start >= 0 ||
         (framing->member != NULL && replay_owed (framing));
}

/* Keeps a group packet (at start in buffer, which it leaves) until the
 * Hello reply.  FALSE if no memory. */
static dbus_bool_t
defer_packet (DBusSeqpacketFraming *framing,
              dbus_uint64_t         sender_id,
              DBusString           *buffer,
              int                   start,
              int                   got)
{
  DeferredPacket *packet = dbus_malloc (sizeof (DeferredPacket) + got);

  if (packet == NULL)
    return FALSE;

  packet->sender_id = sender_id;
  packet->len = got;
  memcpy (packet->data, _dbus_string_get_const_data_len (buffer, start, got), got);
  if (_dbus_list_append (&framing->deferred, packet))
    return TRUE;

  dbus_free (packet);
  return FALSE;
}

/* A member's packet from another member (sender id not 0): one message
 * or nothing; refused packets are dropped, not treated as a violation.
 * A kept message leaves buffer as the message its check loaded, in
 * framing->checked, so that the loader does not parse it again; that
 * keeps the order only when nothing else waits in buffer.  Without
 * memory the packet is kept pending.  Returns got. */
static int
peer_packet (DBusSeqpacketFraming *framing,
             dbus_uint64_t         sender_id,
             DBusString           *buffer,
             int                   start,
             int                   got)
{
  DBusMessage *message = NULL;
  dbus_bool_t take_message = start == 0 && framing->checked == NULL;

  switch (_dbus_mcast_member_from_peer (framing->member, sender_id,
                                        buffer, start, got,
                                        take_message ? &message : NULL))
    {
    case DBUS_MCAST_KEEP:
      if (message == NULL)
        return got;
      framing->checked = message;
      break;
    case DBUS_MCAST_DEFER:
      if (!defer_packet (framing, sender_id, buffer, start, got))
        {
          keep_pending (framing, start, got, sender_id, NULL);
          return got;
        }
      break;
    case DBUS_MCAST_NO_MEMORY:
      keep_pending (framing, start, got, sender_id, NULL);
      return got;
    case DBUS_MCAST_DROP:
    default:
      break;
    }

  _dbus_string_set_length (buffer, start);
  return got;
}

/* The Hello reply was read: the group packets that came before it get
 * their checks now, and those kept follow the reply into buffer.  Stops
 * without memory, where _dbus_seqpacket_place_pending() goes on. */
static void
replay_deferred (DBusSeqpacketFraming *framing,
                 DBusString           *buffer)
{
  DeferredPacket *packet;

  while (framing->pending_start < 0 &&
         (packet = _dbus_list_get_first (&framing->deferred)) != NULL)
    {
      int start = _dbus_string_get_length (buffer);

      if (!_dbus_string_append_len (buffer, packet->data, packet->len))
        return;

      _dbus_list_pop_first (&framing->deferred);
      switch (_dbus_mcast_member_from_peer (framing->member, packet->sender_id,
                                            buffer, start, packet->len, NULL))
        {
        case DBUS_MCAST_KEEP:
          break;
        case DBUS_MCAST_NO_MEMORY:
          keep_pending (framing, start, packet->len, packet->sender_id, NULL);
          break;
        case DBUS_MCAST_DROP:
        case DBUS_MCAST_DEFER:
        default:
          _dbus_string_set_length (buffer, start);
          break;
        }
      dbus_free (packet);
    }
}

/* A member's packet from the daemon (sender id 0), just appended to
 * buffer at start.  The daemon's long messages come in fragments, between
 * which packets from the group may arrive: fragments are collected in
 * framing->daemon_message and the message goes to buffer when complete.
 * Unix fds come with the first fragment and stay in the loader's fd queue
 * meanwhile (group packets carry none).  Without memory the packet (or
 * the whole message) is kept pending; each step changes nothing until it
 * succeeds.  The member may take a whole packet's fds (fds, n_fds: NULL
 * when it is placed again) for a signal it consumes.  Returns got. */
static int
daemon_packet (DBusSeqpacketFraming *framing,
               DBusString           *buffer,
               int                   start,
               int                   got,
               int                  *fds,
               unsigned int         *n_fds)
{
  int len = got;

  if (framing->remaining > 0)
    {
      /* A fragment before the last: collect it */
      if (!_dbus_string_move (buffer, start, &framing->daemon_message,
                              _dbus_string_get_length (&framing->daemon_message)))
        keep_pending (framing, start, got, 0, NULL);
      return got;
    }

  if (_dbus_string_get_length (&framing->daemon_message) > 0)
    {
      /* The last fragment: the fragments before it go in front of it */
      len += _dbus_string_get_length (&framing->daemon_message);
      if (!_dbus_string_move (&framing->daemon_message, 0, buffer, start))
        {
          keep_pending (framing, start, got, 0, NULL);
          return got;
        }
    }

  switch (_dbus_mcast_member_from_daemon (framing->member, buffer, start, len,
                                          len == got ? fds : NULL, n_fds))
    {
    case DBUS_MCAST_DROP:
      _dbus_string_set_length (buffer, start);
      break;
    case DBUS_MCAST_NO_MEMORY:
      keep_pending (framing, start, len, 0, NULL);
      return got;
    case DBUS_MCAST_KEEP:
    case DBUS_MCAST_DEFER:
    default:
      break;
    }

  if (replay_owed (framing))
    replay_deferred (framing, buffer);

  return got;
}

/* A copy the kernel diverted from our full member: a whole message from
 * another member, which the daemon sends back to the member.  It never
 * touches framing->remaining, so it may arrive between the fragments of a
 * message the member sent.  One that does not parse (or, with got 0, did
 * not fit) stands in as an invalid copy: the member's libdbus would have
 * dropped it, and the daemon drops it but learns its seq.  Without
 * memory it is kept pending.  Returns got. */
static int
diverted_packet (DBusSeqpacketFraming        *framing,
                 const DBusSeqpacketDiverted *diverted,
                 DBusString                  *buffer,
                 int                          start,
                 int                          got)
{
  DBusError error = DBUS_ERROR_INIT;
  DBusSeqpacketDiverted *copy;
  DBusMessage *message;
  dbus_bool_t invalid = FALSE;

  _dbus_assert (diverted_slot >= 0);
  _dbus_assert (framing->checked == NULL);

  /* got 0: the packet was longer than any reader takes */
  message = got == 0 ? NULL :
    dbus_message_demarshal (_dbus_string_get_const_data_len (buffer, start, got),
                            got, &error);
  if (message == NULL)
    {
      if (dbus_error_has_name (&error, DBUS_ERROR_NO_MEMORY))
        {
          dbus_error_free (&error);
          goto no_memory;
        }
      _dbus_verbose ("dbus-mcast: diverted copy %u is invalid: %s\n",
                     diverted->seq, got == 0 ? "too long" : error.message);
      dbus_error_free (&error);

      /* The member would drop it, but the daemon must learn its seq to
       * resume the member */
      invalid = TRUE;
      message = dbus_message_new_signal (DBUS_PATH_LOCAL, DBUS_INTERFACE_LOCAL,
                                         "Diverted");
      if (message == NULL)
        goto no_memory;
    }

  copy = dbus_new (DBusSeqpacketDiverted, 1);
  if (copy == NULL)
    goto no_memory;

  *copy = *diverted;
  copy->invalid = invalid;
  if (!dbus_message_set_data (message, diverted_slot, copy, dbus_free))
    {
      dbus_free (copy);
      goto no_memory;
    }

  _dbus_string_set_length (buffer, start);
  framing->checked = message;
  return got;

 no_memory:
  if (message != NULL)
    dbus_message_unref (message);
  keep_pending (framing, start, got, diverted->sender_id, diverted);
  return got;
}

/**
 * Allocates the message data slot of diverted copies; the daemon calls it
 * before it admits anyone into a group, and
 * _dbus_seqpacket_marks_deinit() as often when it is done.
 *
 * @returns #FALSE if no memory
 */
dbus_bool_t
_dbus_seqpacket_marks_init (void)
{
  return dbus_message_allocate_data_slot (&diverted_slot);
}

/**
 * Frees what _dbus_seqpacket_marks_init() allocated.
 */
void
_dbus_seqpacket_marks_deinit (void)
{
  dbus_message_free_data_slot (&diverted_slot);
}

/**
 * Whether a message the daemon read is a copy the kernel diverted to it
 * from the member of that connection, and which.
 *
 * @param message the message
 * @returns the copy's sequence number and sender, or #NULL
 */
const DBusSeqpacketDiverted *
_dbus_seqpacket_message_get_diverted (DBusMessage *message)
{
  if (diverted_slot < 0)
    return NULL;

  return dbus_message_get_data (message, diverted_slot);
}

/**
 * Reads one packet of a multicast group from @fd, the socket of a member
 * that only listens (dbus-daemon's own member, bus/mcast-observer.h) or
 * the acceptor's end of its connection, where the kernel diverts its
 * copies while it is full and, as the group's copy queue, queues every
 * member's copy for the acceptor (UNIX_GROUP_COPY_QUEUE).  Nothing is
 * checked: the caller loads the message (_dbus_mcast_load_packet()).
 *
 * @param fd the socket
 * @param buffer where the packet is appended
 * @param sender_id set to the kernel's id of the packet's sender
 * @param diverted on the acceptor's end, set to the divert sequence
 *   number of a diverted copy; #NULL on the member's socket
 * @param commits on the acceptor's end, set to how many UNIX_GROUP_COMMITs
 *   the group had made when a member's copy for the acceptor was sent,
 *   -1 for any other packet; #NULL on the member's socket
 * @returns the packet's length, 0 at end of stream, -1 with errno set
 *   (EAGAIN when there is none; EPROTO for a packet longer than
 *   #DBUS_SEQPACKET_FRAGMENT_SIZE, which was discarded, or without a
 *   sender id)
 */
int
_dbus_seqpacket_read_group_packet (DBusSocket             fd,
                                   DBusString            *buffer,
                                   dbus_uint64_t         *sender_id,
                                   DBusSeqpacketDiverted *diverted,
                                   dbus_int64_t          *commits)
{
  if (commits != NULL)
    *commits = -1;
  return read_packet (fd, buffer, DBUS_SEQPACKET_FRAGMENT_SIZE, NULL, NULL,
                      sender_id, diverted, commits);
}

/**
 * Reads one packet of message data (after BEGIN) into buffer and checks
 * it against the framing rules of dbus-seqpacket-io.h.  For a member of a
 * multicast group, packets from the other members are checked and maybe
 * dropped (dbus-mcast-member.h); what reaches buffer is always whole
 * messages then.
 *
 * @param framing the connection's receive-side state
 * @param fd the socket
 * @param buffer the message loader's buffer
 * @param fds room for unix fds, or #NULL not to receive any
 * @param n_fds in: room in fds; out: number received
 * @returns bytes read (which may all have been dropped), 0 at end of
 *   stream, -1 with errno set on error (EPROTO for a framing violation)
 */
int
_dbus_seqpacket_read_message (DBusSeqpacketFraming *framing,
                              DBusSocket            fd,
                              DBusString           *buffer,
                              int                  *fds,
                              unsigned int         *n_fds)
{
  int start = _dbus_string_get_length (buffer);
  dbus_uint64_t sender_id = 0;
  DBusSeqpacketDiverted diverted = { 0, 0, FALSE };
  int got;
  const char *violation;

  /* Nothing is read behind what is not placed yet: the transport places
   * it first (_dbus_seqpacket_place_pending()) */
  _dbus_assert (!unplaced (framing));

  got = read_packet (fd, buffer, DBUS_SEQPACKET_FRAGMENT_SIZE, fds, n_fds,
                     framing->member != NULL ? &sender_id : NULL,
                     framing->server ? &diverted : NULL, NULL);
  if (got < 0 && errno == EPROTO && (sender_id != 0 || diverted.seq != 0))
    {
      /* Another member's packet, too long for any reader: the kernel
       * delivered it, but it harms nobody but its sender */
      _dbus_verbose ("dbus-mcast: dropped a group packet longer than the fragment size\n");
      if (diverted.seq != 0)
        diverted_packet (framing, &diverted, buffer, start, 0);
      return DBUS_SEQPACKET_FRAGMENT_SIZE;
    }
  if (got < 0 && errno == EPROTO)
    {
      report_violation (framing, fd, "packet longer than the fragment size", -1);
      errno = EPROTO;
      return -1;
    }
  if (got <= 0)
    return got;

  if (diverted.seq != 0)
    return diverted_packet (framing, &diverted, buffer, start, got);

  if (sender_id != 0)
    {
      /* The kernel refuses unix fds sent to a group */
      _dbus_assert (fds == NULL || *n_fds == 0);
      return peer_packet (framing, sender_id, buffer, start, got);
    }

  violation = check_framing (framing,
                             (const unsigned char *)
                             _dbus_string_get_const_data_len (buffer, start, got),
                             got, fds != NULL && *n_fds > 0);
  if (violation != NULL)
    {
      report_violation (framing, fd, violation, got);
      return discard_packet (buffer, start, fds, n_fds, EPROTO);
    }

  if (framing->member != NULL)
    return daemon_packet (framing, buffer, start, got, fds, n_fds);

  return got;
}

/* Places the pending packet: what ran out of memory runs again */
static void
place_packet (DBusSeqpacketFraming *framing,
              DBusString           *buffer)
{
  DBusSeqpacketDiverted from = framing->pending_from;
  int start = framing->pending_start;
  int len = framing->pending_len;

  framing->pending_start = -1;
  if (from.seq != 0)
    diverted_packet (framing, &from, buffer, start, len);
  else if (from.sender_id != 0)
    peer_packet (framing, from.sender_id, buffer, start, len);
  else
    daemon_packet (framing, buffer, start, len, NULL, NULL);
}

/**
 * Hands the loader what _dbus_seqpacket_read_message() read but did not
 * leave in its buffer as bytes: the message a check loaded, and packets
 * it had no memory to check, defer or reassemble, in the order they were
 * read.  The transport calls it before the loader parses its buffer
 * (_dbus_transport_get_dispatch_status()); nothing is read meanwhile, so
 * that without memory a connection waits for memory, as stock libdbus
 * does, and loses nothing.
 *
 * @param framing the connection's receive-side state
 * @param loader the connection's message loader
 * @returns #FALSE if no memory (call again)
 */
dbus_bool_t
_dbus_seqpacket_place_pending (DBusSeqpacketFraming *framing,
                               DBusMessageLoader    *loader)
{
  DBusString *buffer;
  dbus_bool_t stuck;

  while (unplaced (framing))
    {
      if (framing->checked != NULL)
        {
          /* Read before any pending packet, with nothing before it */
          if (!_dbus_message_loader_queue_loaded_message (loader,
                                                          framing->checked))
            return FALSE;
          dbus_message_unref (framing->checked);
          framing->checked = NULL;
          continue;
        }

      _dbus_message_loader_get_buffer (loader, &buffer, NULL, NULL);
      if (framing->pending_start >= 0)
        {
          place_packet (framing, buffer);
          stuck = framing->pending_start >= 0;
        }
      else
        {
          int deferred = _dbus_list_get_length (&framing->deferred);

          replay_deferred (framing, buffer);
          stuck = framing->pending_start < 0 &&
                  _dbus_list_get_length (&framing->deferred) == deferred;
        }
      _dbus_message_loader_return_buffer (loader, buffer);

      if (stuck)
        return FALSE;
    }

  return TRUE;
}

/**
 * Writes the next packet of a message: the whole message if it is at most
 * #DBUS_SEQPACKET_FRAGMENT_SIZE bytes, else the next fragment of exactly
 * that size (or the rest).  Unix fds go with the first packet.  The write
 * is atomic: either the whole packet is sent or nothing (-1, EAGAIN).
 * _dbus_seqpacket_prepare_message() must have been called for the
 * message (a member may send it to the daemon alone, SCM_UNIX_DIRECT).
 *
 * @param framing the connection's state
 * @param fd the socket
 * @param header the message header
 * @param body the message body
 * @param bytes_already_written bytes of header + body already sent
 * @param fds unix fds to attach when bytes_already_written is 0
 * @param n_fds how many
 * @returns bytes written or -1 with errno set
 */
int
_dbus_seqpacket_write_message (DBusSeqpacketFraming *framing,
                               DBusSocket        fd,
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
  dbus_bool_t direct = FALSE;

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

  if (bytes_already_written > 0)
    n_fds = 0;
  if (n_fds > 0)
    m.msg_controllen += CMSG_SPACE (n_fds * sizeof (int));
#ifdef DBUS_HAVE_MCAST_UAPI
  if (framing->forward_id != 0)
    m.msg_controllen += CMSG_SPACE (sizeof (framing->forward_id));
  /* Every fragment: a continuation must not reach the group either */
  direct = framing->member != NULL &&
           _dbus_mcast_member_is_direct (framing->member);
  if (direct)
    m.msg_controllen += CMSG_SPACE (0);
#endif

  if (m.msg_controllen > 0)
    {
      struct cmsghdr *cm;

      control = dbus_malloc0 (m.msg_controllen);
      if (control == NULL)
        {
          errno = ENOMEM;
          return -1;
        }
      m.msg_control = control;
      cm = CMSG_FIRSTHDR (&m);
      if (n_fds > 0)
        {
          cm->cmsg_level = SOL_SOCKET;
          cm->cmsg_type = SCM_RIGHTS;
          cm->cmsg_len = CMSG_LEN (n_fds * sizeof (int));
          memcpy (CMSG_DATA (cm), fds, n_fds * sizeof (int));
          cm = CMSG_NXTHDR (&m, cm);
        }
#ifdef DBUS_HAVE_MCAST_UAPI
      if (framing->forward_id != 0)
        {
          /* A diverted copy goes back out under its sender's id */
          cm->cmsg_level = SOL_UNIX;
          cm->cmsg_type = SCM_UNIX_SENDER_ID;
          cm->cmsg_len = CMSG_LEN (sizeof (framing->forward_id));
          memcpy (CMSG_DATA (cm), &framing->forward_id,
                  sizeof (framing->forward_id));
          cm = CMSG_NXTHDR (&m, cm);
        }
      if (direct)
        {
          cm->cmsg_level = SOL_UNIX;
          cm->cmsg_type = SCM_UNIX_DIRECT;
          cm->cmsg_len = CMSG_LEN (0);
        }
#endif
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
  framing->write_blocked = bytes < 0 &&
      _dbus_get_is_errno_eagain_or_ewouldblock (saved_errno);

  if (bytes >= 0 && bytes != want)
    {
      /* Cannot happen on SOCK_SEQPACKET: sendmsg() is all or nothing */
      errno = EPROTO;
      return -1;
    }

  if (bytes >= 0 && framing->member != NULL)
    _dbus_mcast_member_wrote (framing->member);
  if (bytes >= 0 && framing->member != NULL &&
      bytes_already_written + bytes == header_len + body_len)
    _dbus_mcast_member_sent (framing->member, fd);

  errno = saved_errno;
  return bytes;
}
