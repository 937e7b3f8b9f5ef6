/* test/mcast-member.c  The member side of the multicast bus (libdbus),
 * against an acceptor that plays dbus-daemon's part by hand.
 *
 * Needs the patched kernel: run it in the VM,
 *   tools/vm/run -- build/dbus-tests/mcast-member --tap
 * On a kernel without multicast AF_UNIX groups every test is skipped.
 *
 * The acceptor is a libdbus DBusServer on a unixseq: address (its
 * listening socket is a kernel group) that offers multicast.  For each
 * client it does the daemon's steps of doc/design.md by hand: it waits for
 * Hello, sets UNIX_PEER_ID = 1 << 32 | N, installs a peer filter that lets
 * everything through (so the checks of the receiving libdbus are what is
 * tested), admits the client with UNIX_ACCEPT_GROUP (SEND_TO_PEER) and
 * answers Hello with the unique name ":1.N".  It never forwards anything
 * unless a test says so: whatever reaches another client without that
 * came through the group.  Everything runs in one thread, every connection
 * non-blocking.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>

#include <dbus/dbus.h>
#include <dbus/dbus-connection-internal.h>
#include <dbus/dbus-mcast-calls.h>
#include <dbus/dbus-mcast-member.h>
#include <dbus/dbus-seqpacket-io.h>
#include <dbus/dbus-server-socket.h>
#include <glib.h>

#include "test-utils-glib.h"
#include <glib/gstdio.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <linux/filter.h>
#include <linux/un.h>
#include <unistd.h>

#ifdef UNIX_PASSID

#define TIMEOUT_US (60 * G_USEC_PER_SEC)
#define TEST_IFACE "org.dbusmcast.Test"
#define TEST_PATH "/org/dbusmcast/Test"

typedef struct
{
  gchar *tmpdir;
  gchar *address;
  DBusServer *server;
  DBusWatch *watch;
  GPtrArray *accepted;    /* the acceptor's ends, in accept order */
  GPtrArray *clients;     /* libdbus clients, to pump */
  DBusConnection *a, *b;
  DBusConnection *a_srv, *b_srv;
  gchar *a_name, *b_name;
} Fixture;

static dbus_bool_t
add_watch (DBusWatch *watch, void *data)
{
  Fixture *f = data;

  if (dbus_watch_get_flags (watch) & DBUS_WATCH_READABLE)
    f->watch = watch;
  return TRUE;
}

static void
remove_watch (DBusWatch *watch, void *data)
{
  Fixture *f = data;

  if (f->watch == watch)
    f->watch = NULL;
}

static void
new_connection (DBusServer *server, DBusConnection *c, void *data)
{
  Fixture *f = data;

  dbus_connection_set_exit_on_disconnect (c, FALSE);
  g_ptr_array_add (f->accepted, dbus_connection_ref (c));
}

/* One round of I/O on everything */
static void
pump (Fixture *f)
{
  guint i;

  if (f->watch != NULL)
    {
      struct pollfd p = { dbus_watch_get_unix_fd (f->watch), POLLIN, 0 };

      if (poll (&p, 1, 0) == 1)
        dbus_watch_handle (f->watch, DBUS_WATCH_READABLE);
    }

  for (i = 0; i < f->clients->len; i++)
    dbus_connection_read_write (g_ptr_array_index (f->clients, i), 0);
  for (i = 0; i < f->accepted->len; i++)
    dbus_connection_read_write (g_ptr_array_index (f->accepted, i), 0);
  g_usleep (1000);
}

/* Pumps for ms milliseconds */
static void
pump_for (Fixture *f, int ms)
{
  gint64 end = g_get_monotonic_time () + ms * 1000;

  while (g_get_monotonic_time () < end)
    pump (f);
}

/* Pumps until c has a message, and pops it */
static DBusMessage *
next_message (Fixture *f, DBusConnection *c)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;
  DBusMessage *m;

  while ((m = dbus_connection_pop_message (c)) == NULL)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_assert_true (dbus_connection_get_is_connected (c));
      pump (f);
    }
  return m;
}

static void
assert_no_message (Fixture *f, DBusConnection *c, int ms)
{
  DBusMessage *m;

  pump_for (f, ms);
  m = dbus_connection_pop_message (c);
  if (m != NULL)
    g_error ("unexpected message: type %d member %s from %s",
             dbus_message_get_type (m), dbus_message_get_member (m),
             dbus_message_get_sender (m));
  g_assert_true (dbus_connection_get_is_connected (c));
}

static DBusConnection *
accept_next (Fixture *f)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;
  guint n = f->accepted->len;

  while (f->accepted->len == n)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      pump (f);
    }
  return g_ptr_array_index (f->accepted, n);
}

/* The peer filter of the client on the acceptor's end @fd: it returns
 * @verdict for every message */
static void
set_peer_filter (int fd, guint32 verdict)
{
  struct sock_filter all[] = { BPF_STMT (BPF_RET | BPF_K, verdict) };
  struct sock_fprog prog = { 1, all };

  g_assert_cmpint (setsockopt (fd, SOL_UNIX, UNIX_PEER_FILTER, &prog, sizeof (prog)), ==, 0);
}

/* The daemon's steps of doc/design.md "Hello", by hand */
static void
admit (int fd, guint32 minor, guint32 flags)
{
  struct unix_accept_req req = { flags, 0 };
  guint64 id = ((guint64) 1 << 32) | minor;

  g_assert_cmpint (setsockopt (fd, SOL_UNIX, UNIX_PEER_ID, &id, sizeof (id)), ==, 0);
  set_peer_filter (fd, 0xffffffff);
  g_assert_cmpint (setsockopt (fd, SOL_UNIX, UNIX_ACCEPT_GROUP, &req, sizeof (req)), ==, 0);
}

/* The peer filter of the client on the acceptor's end @srv claims every
 * message as addressed to that client, as the daemon's claims the calls
 * to the client's names (UNIX_PEER_ADDRESSEE), or only lets them through */
static void
claim_all (DBusConnection *srv, gboolean claim)
{
  int fd;

  g_assert_true (dbus_connection_get_socket (srv, &fd));
  set_peer_filter (fd, claim ? UNIX_PEER_ADDRESSEE : 0xffffffff);
}

static void
send_flush (Fixture *f, DBusConnection *c, DBusMessage *m)
{
  g_assert_true (dbus_connection_send (c, m, NULL));
  pump (f);
}

/* A message from "the daemon" on the acceptor's end srv */
static DBusMessage *
driver_message (DBusMessage *m, const char *destination)
{
  g_assert_true (dbus_message_set_sender (m, DBUS_SERVICE_DBUS));
  g_assert_true (dbus_message_set_destination (m, destination));
  return m;
}

/* "The daemon" sends the client named name, on its end srv, its private
 * signal member with the one argument argument */
static void
send_daemon_signal (Fixture        *f,
                    DBusConnection *srv,
                    const char     *name,
                    const char     *member,
                    dbus_uint32_t   argument)
{
  DBusMessage *signal = dbus_message_new_signal (DBUS_PATH_DBUS,
                                                 DBUS_MCAST_INTERFACE, member);

  driver_message (signal, name);
  g_assert_true (dbus_message_append_args (signal, DBUS_TYPE_UINT32, &argument,
                                           DBUS_TYPE_INVALID));
  send_flush (f, srv, signal);
  dbus_message_unref (signal);
}

/* "The daemon" hands the client named name, on its end srv, its table of
 * calls (dbus/dbus-mcast-calls.h), as before its Hello reply */
static void
send_calls (Fixture        *f,
            DBusConnection *srv,
            const char     *name)
{
  const DBusMcastCallTable *table;
  DBusError error = DBUS_ERROR_INIT;
  DBusMessage *signal;
  int fd;

  g_assert_true (_dbus_mcast_calls_create (&fd, &table, &error));
  test_assert_no_error (&error);
  signal = dbus_message_new_signal (DBUS_PATH_DBUS, DBUS_MCAST_INTERFACE,
                                    DBUS_MCAST_CALLS);
  driver_message (signal, name);
  g_assert_true (dbus_message_append_args (signal, DBUS_TYPE_UNIX_FD, &fd,
                                           DBUS_TYPE_INVALID));
  send_flush (f, srv, signal);
  dbus_message_unref (signal);
  close (fd);
  _dbus_mcast_calls_unmap (table);
}

/* "The daemon" tells the client named name, on its end srv, that its
 * message with this serial is routed */
static void
send_routed (Fixture        *f,
             DBusConnection *srv,
             const char     *name,
             dbus_uint32_t   serial)
{
  send_daemon_signal (f, srv, name, DBUS_MCAST_ROUTED, serial);
}

/* Opens a libdbus client; with promote, the acceptor admits it as
 * ":1.minor" when it says Hello (and checks it negotiated multicast), else
 * it only answers Hello (and checks it did not).  before_reply, if not
 * NULL, runs between the admission and the Hello reply. */
static DBusConnection *
open_client (Fixture *f, guint32 minor, gboolean promote,
             void (*before_reply) (Fixture *f),
             DBusConnection **srv_p, gchar **name_p)
{
  DBusError error = DBUS_ERROR_INIT;
  DBusConnection *c = dbus_connection_open_private (f->address, &error);
  DBusConnection *srv;
  DBusMessage *hello, *reply, *m;
  gchar *name = g_strdup_printf (":1.%u", minor);
  const char *name_c = name;
  dbus_uint32_t serial;
  int fd = -1;

  test_assert_no_error (&error);
  dbus_connection_set_exit_on_disconnect (c, FALSE);
  g_ptr_array_add (f->clients, c);
  srv = accept_next (f);

  hello = dbus_message_new_method_call (DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                                        DBUS_INTERFACE_DBUS, "Hello");
  g_assert_true (dbus_connection_send (c, hello, &serial));
  dbus_message_unref (hello);

  m = next_message (f, srv);
  g_assert_true (dbus_message_is_method_call (m, DBUS_INTERFACE_DBUS, "Hello"));
  g_assert_cmpint (_dbus_connection_get_mcast_negotiated (srv), ==, promote);
  if (promote)
    {
      g_assert_true (dbus_connection_get_socket (srv, &fd));
      admit (fd, minor, UNIX_MREQ_SEND_TO_PEER);
      send_calls (f, srv, name);
    }
  if (before_reply != NULL)
    before_reply (f);

  reply = driver_message (dbus_message_new_method_return (m), name);
  g_assert_true (dbus_message_append_args (reply, DBUS_TYPE_STRING, &name_c,
                                           DBUS_TYPE_INVALID));
  send_flush (f, srv, reply);
  dbus_message_unref (reply);
  dbus_message_unref (m);

  m = next_message (f, c);
  g_assert_cmpint (dbus_message_get_type (m), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  g_assert_cmpuint (dbus_message_get_reply_serial (m), ==, serial);
  dbus_message_unref (m);
  g_assert_true (dbus_bus_set_unique_name (c, name));

  *srv_p = srv;
  *name_p = name;
  return c;
}

/* Is the kernel able to make groups?  The DBusServer says whether its
 * listening socket is one. */
static void
setup (Fixture *f, gconstpointer data)
{
  DBusError error = DBUS_ERROR_INIT;
  gchar *listen;
  gboolean offer = g_strcmp0 (data, "not offered") != 0;

  f->tmpdir = g_dir_make_tmp ("mcast-member-XXXXXX", NULL);
  g_assert_nonnull (f->tmpdir);
  listen = g_strdup_printf ("unixseq:path=%s/bus", f->tmpdir);
  f->server = dbus_server_listen (listen, &error);
  test_assert_no_error (&error);
  g_free (listen);
  f->address = dbus_server_get_address (f->server);
  f->accepted = g_ptr_array_new ();
  f->clients = g_ptr_array_new ();
  g_assert_true (dbus_server_set_watch_functions (f->server, add_watch,
                                                  remove_watch, NULL, f, NULL));
  dbus_server_set_new_connection_function (f->server, new_connection, f, NULL);

  if (!_dbus_server_socket_set_mcast_offered (f->server, offer))
    {
      g_test_skip ("the kernel has no multicast AF_UNIX groups");
      return;
    }

  f->a = open_client (f, 1, offer, NULL, &f->a_srv, &f->a_name);
  f->b = open_client (f, 2, offer, NULL, &f->b_srv, &f->b_name);
}

static void
teardown (Fixture *f, gconstpointer data)
{
  guint i;

  for (i = 0; i < f->clients->len; i++)
    {
      dbus_connection_close (g_ptr_array_index (f->clients, i));
      dbus_connection_unref (g_ptr_array_index (f->clients, i));
    }
  for (i = 0; i < f->accepted->len; i++)
    {
      dbus_connection_close (g_ptr_array_index (f->accepted, i));
      dbus_connection_unref (g_ptr_array_index (f->accepted, i));
    }
  g_ptr_array_unref (f->clients);
  g_ptr_array_unref (f->accepted);
  dbus_server_disconnect (f->server);
  dbus_server_unref (f->server);
  dbus_free (f->address);
  g_free (f->a_name);
  g_free (f->b_name);
  g_rmdir (f->tmpdir);
  g_free (f->tmpdir);
}

static DBusMessage *
new_call (const char *destination, const char *method)
{
  return dbus_message_new_method_call (destination, TEST_PATH, TEST_IFACE, method);
}

/* A method call from A reaches B through the group, with A's unique name
 * in SENDER whatever A's application put there; B's reply reaches A, and
 * so does a second one, unrequested, as stock delivers it under a policy
 * that allows everything. */
static void
test_unicast (Fixture *f, gconstpointer data)
{
  DBusMessage *call, *m, *reply;
  dbus_uint32_t serial;

  if (g_test_failed () || f->a == NULL)
    return;

  call = new_call (f->b_name, "Ping");
  g_assert_true (dbus_message_set_sender (call, "org.example.Forged"));
  g_assert_true (dbus_connection_send (f->a, call, &serial));
  dbus_message_unref (call);

  m = next_message (f, f->b);
  g_assert_true (dbus_message_is_method_call (m, TEST_IFACE, "Ping"));
  g_assert_cmpstr (dbus_message_get_sender (m), ==, f->a_name);
  g_assert_cmpstr (dbus_message_get_destination (m), ==, f->b_name);

  /* The acceptor saw its copy (SEND_TO_PEER) and forwarded nothing: the
   * group delivered it */
  reply = next_message (f, f->a_srv);
  g_assert_true (dbus_message_is_method_call (reply, TEST_IFACE, "Ping"));
  g_assert_cmpstr (dbus_message_get_sender (reply), ==, f->a_name);
  dbus_message_unref (reply);

  reply = dbus_message_new_method_return (m);
  send_flush (f, f->b, reply);
  /* the same reply again, then a marker: A gets both replies, the second
   * unrequested (the policy of a bus that promotes lets it through), and
   * the marker */
  send_flush (f, f->b, reply);
  dbus_message_unref (reply);
  reply = new_call (f->a_name, "Marker");
  dbus_message_set_no_reply (reply, TRUE);
  send_flush (f, f->b, reply);
  dbus_message_unref (reply);
  dbus_message_unref (m);

  m = next_message (f, f->a);
  g_assert_cmpint (dbus_message_get_type (m), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  g_assert_cmpuint (dbus_message_get_reply_serial (m), ==, serial);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, f->b_name);
  dbus_message_unref (m);
  m = next_message (f, f->a);
  g_assert_cmpint (dbus_message_get_type (m), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  g_assert_cmpuint (dbus_message_get_reply_serial (m), ==, serial);
  dbus_message_unref (m);
  m = next_message (f, f->a);
  g_assert_true (dbus_message_is_method_call (m, TEST_IFACE, "Marker"));
  dbus_message_unref (m);
}

/* Sends one packet on a raw socket */
static void
raw_send (int fd, const void *data, gsize len)
{
  g_assert_cmpint (send (fd, data, len, MSG_NOSIGNAL), ==, (gssize) len);
}

static void
raw_send_message (int fd, DBusMessage *m, dbus_uint32_t serial)
{
  char *bytes;
  int len;

  dbus_message_set_serial (m, serial);
  g_assert_true (dbus_message_marshal (m, &bytes, &len));
  raw_send (fd, bytes, len);
  dbus_free (bytes);
  dbus_message_unref (m);
}

/* Waits for one line of SASL on a raw socket */
static gchar *
raw_read_line (Fixture *f, int fd)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;
  char buf[512];
  gssize n;

  while ((n = recv (fd, buf, sizeof (buf) - 1, MSG_DONTWAIT)) < 0 && errno == EAGAIN)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      pump (f);
    }
  g_assert_cmpint (n, >, 0);
  buf[n] = '\0';
  return g_strdup (buf);
}

/* A third member that does not use libdbus: it can write anything.  It is
 * admitted as ":1.3" without SEND_TO_PEER (the acceptor's end does not
 * read its garbage). */
static int
open_raw_member (Fixture *f)
{
  struct sockaddr_un addr = { AF_UNIX, "" };
  int fd = socket (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  gchar *auth, *line, *uid;
  DBusConnection *srv;
  int srv_fd;

  g_snprintf (addr.sun_path, sizeof (addr.sun_path), "%s/bus", f->tmpdir);
  g_assert_cmpint (connect (fd, (struct sockaddr *) &addr, sizeof (addr)), ==, 0);
  srv = accept_next (f);

  raw_send (fd, "", 1);
  uid = g_strdup_printf ("%u", getuid ());
  {
    GString *hex = g_string_new ("AUTH EXTERNAL ");
    const char *p;

    for (p = uid; *p != '\0'; p++)
      g_string_append_printf (hex, "%02x", (unsigned char) *p);
    g_string_append (hex, "\r\n");
    auth = g_string_free (hex, FALSE);
  }
  g_free (uid);
  raw_send (fd, auth, strlen (auth));
  g_free (auth);
  line = raw_read_line (f, fd);
  g_assert_true (g_str_has_prefix (line, "OK "));
  g_free (line);
  raw_send (fd, "BEGIN\r\n", 7);
  while (!dbus_connection_get_is_authenticated (srv))
    pump (f);

  g_assert_true (dbus_connection_get_socket (srv, &srv_fd));
  admit (srv_fd, 3, 0);
  return fd;
}

/* What a member writes that does not pass the checks is dropped at the
 * receiver, which stays connected and gets the member's next valid
 * message. */
static void
test_raw_member (Fixture *f, gconstpointer data)
{
  int c;
  DBusMessage *m;
  char garbage[100];
  char *one;
  int one_len;
  gchar *both;
  guint i;

  if (g_test_failed () || f->a == NULL)
    return;

  c = open_raw_member (f);

  /* 1. SENDER is A's name, but the kernel says the packet is from :1.3 */
  m = new_call (f->b_name, "Forged");
  dbus_message_set_sender (m, f->a_name);
  raw_send_message (c, m, 1);

  /* 2. no SENDER at all */
  raw_send_message (c, new_call (f->b_name, "Anonymous"), 2);

  /* 3. garbage */
  for (i = 0; i < sizeof (garbage); i++)
    garbage[i] = (char) (i * 37 + 11);
  garbage[0] = 'l';
  raw_send (c, garbage, sizeof (garbage));

  /* 4. a valid header with a body that does not match its signature */
  m = new_call (f->b_name, "BadBody");
  dbus_message_set_sender (m, ":1.3");
  {
    const char *s = "abcdefgh";

    dbus_message_append_args (m, DBUS_TYPE_STRING, &s, DBUS_TYPE_INVALID);
  }
  dbus_message_set_serial (m, 4);
  g_assert_true (dbus_message_marshal (m, &one, &one_len));
  one[one_len - 1] = 'x'; /* the string's terminating nul */
  raw_send (c, one, one_len);
  dbus_free (one);
  dbus_message_unref (m);

  /* 5. two valid messages in one packet */
  m = new_call (f->b_name, "Twice");
  dbus_message_set_sender (m, ":1.3");
  dbus_message_set_serial (m, 5);
  g_assert_true (dbus_message_marshal (m, &one, &one_len));
  both = g_malloc (2 * one_len);
  memcpy (both, one, one_len);
  memcpy (both + one_len, one, one_len);
  raw_send (c, both, 2 * one_len);
  g_free (both);
  dbus_free (one);
  dbus_message_unref (m);

  /* 6. a reply to a call B never made: unrequested, delivered as stock
   * delivers it under a policy that allows everything (checked below) */
  m = dbus_message_new (DBUS_MESSAGE_TYPE_METHOD_RETURN);
  dbus_message_set_reply_serial (m, 12345);
  dbus_message_set_destination (m, f->b_name);
  dbus_message_set_sender (m, ":1.3");
  raw_send_message (c, m, 7);

  /* 7. a broadcast B has no match rule for */
  m = dbus_message_new_signal (TEST_PATH, TEST_IFACE, "Unwanted");
  dbus_message_set_sender (m, ":1.3");
  raw_send_message (c, m, 8);

  /* 8. unicast to A, which B has no eavesdropping rule for */
  m = new_call (f->a_name, "ForA");
  dbus_message_set_sender (m, ":1.3");
  raw_send_message (c, m, 9);

  /* and one valid message */
  m = new_call (f->b_name, "Good");
  dbus_message_set_sender (m, ":1.3");
  raw_send_message (c, m, 10);

  m = next_message (f, f->b);
  g_assert_cmpint (dbus_message_get_type (m), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  g_assert_cmpuint (dbus_message_get_reply_serial (m), ==, 12345);
  dbus_message_unref (m);
  m = next_message (f, f->b);
  g_assert_true (dbus_message_is_method_call (m, TEST_IFACE, "Good"));
  g_assert_cmpstr (dbus_message_get_sender (m), ==, ":1.3");
  dbus_message_unref (m);
  assert_no_message (f, f->b, 100);

  /* A got the one for it, nothing else */
  m = next_message (f, f->a);
  g_assert_true (dbus_message_is_method_call (m, TEST_IFACE, "ForA"));
  dbus_message_unref (m);
  assert_no_message (f, f->a, 100);
  close (c);
}

static dbus_bool_t
keep_write_watch (DBusWatch *watch, void *data)
{
  if (dbus_watch_get_flags (watch) & DBUS_WATCH_WRITABLE)
    *(DBusWatch **) data = watch;
  return TRUE;
}

static void
forget_write_watch (DBusWatch *watch, void *data)
{
  if (*(DBusWatch **) data == watch)
    *(DBusWatch **) data = NULL;
}

/* A sends a message that must take the daemon path (fds, or longer than a
 * packet), then another one: the first goes to the acceptor alone, and A
 * writes nothing more until the acceptor's Routed signal for it (a Routed
 * signal for another serial does not count); the signals are never
 * dispatched. */
static void
test_routed (Fixture *f, gconstpointer data)
{
  gboolean with_fd = g_strcmp0 (data, "fd") == 0;
  DBusMessage *m;
  dbus_uint32_t serial, wrong;
  int pipe_fds[2];
  int fd = -1;
  DBusWatch *write_watch = NULL;

  if (g_test_failed () || f->a == NULL)
    return;

  /* A main loop would watch this: it must be off while A is fenced, or
   * the loop would spin */
  g_assert_true (dbus_connection_set_watch_functions (f->a, keep_write_watch,
                                                      forget_write_watch, NULL,
                                                      &write_watch, NULL));
  g_assert_nonnull (write_watch);

  m = new_call (f->b_name, "Routed");
  dbus_message_set_no_reply (m, TRUE);
  if (with_fd)
    {
      g_assert_cmpint (pipe (pipe_fds), ==, 0);
      g_assert_true (dbus_message_append_args (m, DBUS_TYPE_UNIX_FD, &pipe_fds[1],
                                               DBUS_TYPE_INVALID));
      close (pipe_fds[1]);
    }
  else
    {
      gchar *big = g_strnfill (3 * DBUS_SEQPACKET_FRAGMENT_SIZE, 'x');

      g_assert_true (dbus_message_append_args (m, DBUS_TYPE_STRING, &big,
                                               DBUS_TYPE_INVALID));
      g_free (big);
    }
  g_assert_true (dbus_connection_send (f->a, m, &serial));
  dbus_message_unref (m);
  m = new_call (f->b_name, "After");
  dbus_message_set_no_reply (m, TRUE);
  g_assert_true (dbus_connection_send (f->a, m, NULL));
  dbus_message_unref (m);

  /* The acceptor gets the message; B gets nothing; A holds "After" */
  m = next_message (f, f->a_srv);
  g_assert_true (dbus_message_is_method_call (m, TEST_IFACE, "Routed"));
  g_assert_cmpstr (dbus_message_get_sender (m), ==, f->a_name);
  assert_no_message (f, f->b, 200);
  assert_no_message (f, f->a_srv, 0);
  g_assert_true (dbus_connection_has_messages_to_send (f->a));
  g_assert_false (dbus_watch_get_enabled (write_watch));

  /* A Routed signal for another serial changes nothing */
  wrong = serial + 1000;
  send_routed (f, f->a_srv, f->a_name, wrong);
  assert_no_message (f, f->b, 200);
  g_assert_true (dbus_connection_has_messages_to_send (f->a));

  /* The acceptor routes it to B (serial and SENDER kept, as dbus-daemon
   * does), and only once all of it is in B's socket puts the fence down:
   * queued in userspace is not enough, A's next group message would
   * overtake the rest of a long message */
  send_flush (f, f->b_srv, m);
  dbus_message_unref (m);
  while (dbus_connection_has_messages_to_send (f->b_srv))
    pump (f);
  send_routed (f, f->a_srv, f->a_name, serial);

  /* B: the routed message, then "After" through the group */
  m = next_message (f, f->b);
  g_assert_true (dbus_message_is_method_call (m, TEST_IFACE, "Routed"));
  g_assert_cmpstr (dbus_message_get_sender (m), ==, f->a_name);
  if (with_fd)
    {
      char buf[4] = { 0 };

      g_assert_true (dbus_message_get_args (m, NULL, DBUS_TYPE_UNIX_FD, &fd,
                                            DBUS_TYPE_INVALID));
      g_assert_cmpint (write (fd, "fd!", 3), ==, 3);
      close (fd);
      g_assert_cmpint (read (pipe_fds[0], buf, 3), ==, 3);
      g_assert_cmpstr (buf, ==, "fd!");
      close (pipe_fds[0]);
    }
  dbus_message_unref (m);
  m = next_message (f, f->b);
  g_assert_true (dbus_message_is_method_call (m, TEST_IFACE, "After"));
  dbus_message_unref (m);

  /* A dispatched neither Routed signal, and wrote everything */
  assert_no_message (f, f->a, 100);
  g_assert_false (dbus_connection_has_messages_to_send (f->a));
  dbus_connection_set_watch_functions (f->a, NULL, NULL, NULL, NULL, NULL);
}

/* B calls AddMatch or RemoveMatch, expecting a reply (as
 * dbus_bus_add_match() with an error does) or not (as without); the
 * acceptor answers as dbus-daemon would: with a method return if a reply
 * is expected, with an error (refuse) in any case, then with the Routed
 * signal that lets B write again. */
static void
match_call (Fixture *f, const char *method, const char *rule,
            gboolean no_reply, gboolean refuse)
{
  DBusMessage *m, *call;
  dbus_uint32_t serial;

  m = dbus_message_new_method_call (DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                                    DBUS_INTERFACE_DBUS, method);
  g_assert_true (dbus_message_append_args (m, DBUS_TYPE_STRING, &rule,
                                           DBUS_TYPE_INVALID));
  dbus_message_set_no_reply (m, no_reply);
  send_flush (f, f->b, m);
  dbus_message_unref (m);
  call = next_message (f, f->b_srv);
  g_assert_true (dbus_message_is_method_call (call, DBUS_INTERFACE_DBUS, method));
  g_assert_cmpstr (dbus_message_get_sender (call), ==, f->b_name);
  serial = dbus_message_get_serial (call);
  if (refuse)
    m = dbus_message_new_error (call, DBUS_ERROR_MATCH_RULE_NOT_FOUND, "no");
  else if (!no_reply)
    m = dbus_message_new_method_return (call);
  else
    m = NULL;
  dbus_message_unref (call);
  if (m != NULL)
    {
      send_flush (f, f->b_srv, driver_message (m, f->b_name));
      dbus_message_unref (m);
      m = next_message (f, f->b); /* the reply */
      g_assert_cmpint (dbus_message_get_type (m), ==,
                       refuse ? DBUS_MESSAGE_TYPE_ERROR : DBUS_MESSAGE_TYPE_METHOD_RETURN);
      dbus_message_unref (m);
    }
  send_routed (f, f->b_srv, f->b_name, serial);
}

static void
emit (Fixture *f, const char *member)
{
  DBusMessage *m = dbus_message_new_signal (TEST_PATH, TEST_IFACE, member);

  send_flush (f, f->a, m);
  dbus_message_unref (m);
}

static void
expect_signal (Fixture *f, const char *member)
{
  DBusMessage *m = next_message (f, f->b);

  if (!dbus_message_is_signal (m, TEST_IFACE, member))
    g_error ("expected signal %s, got type %d %s from %s", member,
             dbus_message_get_type (m), dbus_message_get_member (m),
             dbus_message_get_sender (m));
  g_assert_cmpstr (dbus_message_get_sender (m), ==, f->a_name);
  dbus_message_unref (m);
}

/* Broadcasts reach B through the group only if one of B's match rules
 * matches: rules count once the daemon answered AddMatch (or at once for
 * an AddMatch without reply), stop counting once it answered RemoveMatch,
 * and one the daemon refused does not count; unicast for someone else
 * only with an eavesdropping rule. */
static void
test_broadcast (Fixture *f, gconstpointer data)
{
  const char *hit = "type='signal',interface='" TEST_IFACE "',member='Hit'";
  const char *also = "type='signal',member='Also'";
  DBusMessage *m;

  if (g_test_failed () || f->a == NULL)
    return;

  match_call (f, "AddMatch", hit, FALSE, FALSE);
  match_call (f, "AddMatch", "type='signal',member='Refused'", FALSE, TRUE);
  match_call (f, "AddMatch", "type='signal',member='RefusedLater'", TRUE, TRUE);
  match_call (f, "AddMatch", also, TRUE, FALSE);
  emit (f, "Miss");
  emit (f, "Refused");
  emit (f, "RefusedLater");
  emit (f, "Hit");
  emit (f, "Also");
  expect_signal (f, "Hit");
  expect_signal (f, "Also");
  assert_no_message (f, f->b, 100);

  /* Added twice, removed once: still there */
  match_call (f, "AddMatch", hit, FALSE, FALSE);
  match_call (f, "RemoveMatch", hit, FALSE, FALSE);
  emit (f, "Hit");
  expect_signal (f, "Hit");
  match_call (f, "RemoveMatch", hit, TRUE, FALSE);
  match_call (f, "RemoveMatch", also, FALSE, FALSE);
  emit (f, "Hit");
  emit (f, "Also");
  assert_no_message (f, f->b, 100);

  /* A's call to someone else: B sees it only while eavesdropping */
  m = new_call (":1.99", "NotForB");
  dbus_message_set_no_reply (m, TRUE);
  send_flush (f, f->a, m);
  dbus_message_unref (m);
  assert_no_message (f, f->b, 100);
  match_call (f, "AddMatch", "eavesdrop=true,type='method_call',interface='" TEST_IFACE "'",
              FALSE, FALSE);
  m = new_call (":1.99", "NotForB");
  dbus_message_set_no_reply (m, TRUE);
  send_flush (f, f->a, m);
  dbus_message_unref (m);
  m = next_message (f, f->b);
  g_assert_true (dbus_message_is_method_call (m, TEST_IFACE, "NotForB"));
  g_assert_cmpstr (dbus_message_get_destination (m), ==, ":1.99");
  dbus_message_unref (m);
}

/* "The daemon" tells B that @owner ("" for none) owns @name */
static void
send_owners (Fixture    *f,
             const char *name,
             const char *owner)
{
  DBusMessage *owners = dbus_message_new_signal (DBUS_PATH_DBUS,
                                                 DBUS_MCAST_INTERFACE,
                                                 DBUS_MCAST_OWNERS);
  DBusMessageIter args, array, entry;

  driver_message (owners, f->b_name);
  dbus_message_iter_init_append (owners, &args);
  g_assert_true (dbus_message_iter_open_container (&args, DBUS_TYPE_ARRAY, "(ss)", &array));
  g_assert_true (dbus_message_iter_open_container (&array, DBUS_TYPE_STRUCT, NULL, &entry));
  g_assert_true (dbus_message_iter_append_basic (&entry, DBUS_TYPE_STRING, &name));
  g_assert_true (dbus_message_iter_append_basic (&entry, DBUS_TYPE_STRING, &owner));
  g_assert_true (dbus_message_iter_close_container (&array, &entry));
  g_assert_true (dbus_message_iter_close_container (&args, &array));
  send_flush (f, f->b_srv, owners);
  dbus_message_unref (owners);
}

/* A rule of B's whose sender= key is a well-known name matches A's
 * broadcasts only while the daemon's Owners signal says A owns the name:
 * not before the first such signal, not once it names another owner or
 * none.  The signal itself is never dispatched. */
static void
test_owners (Fixture *f, gconstpointer data)
{
  const char *name = "org.dbusmcast.Test.Owned";

  if (g_test_failed () || f->a == NULL)
    return;

  match_call (f, "AddMatch",
              "type='signal',sender='org.dbusmcast.Test.Owned',member='Hit'",
              FALSE, FALSE);
  emit (f, "Hit");
  assert_no_message (f, f->b, 100);

  send_owners (f, name, f->a_name);
  emit (f, "Hit");
  expect_signal (f, "Hit");

  send_owners (f, name, ":1.99");
  emit (f, "Hit");
  assert_no_message (f, f->b, 100);

  send_owners (f, name, f->a_name);
  send_owners (f, name, "");
  emit (f, "Hit");
  assert_no_message (f, f->b, 100);
}

/* "The daemon"'s Departed signal to A: the members names left, in that
 * order */
static DBusMessage *
departed_signal (Fixture     *f,
                 const char **names,
                 int          n_names)
{
  DBusMessage *departed = _dbus_mcast_departed_new (names, n_names);

  g_assert_nonnull (departed);
  return driver_message (departed, f->a_name);
}

/* "The daemon" tells A that the members names left */
static void
send_departed (Fixture     *f,
               const char **names,
               int          n_names)
{
  DBusMessage *departed = departed_signal (f, names, n_names);

  send_flush (f, f->a_srv, departed);
  dbus_message_unref (departed);
}

/* A pending call's reply, and when it came */
typedef struct
{
  DBusMessage *reply;
  guint rank;                 /* 1 for the first reply of a test, ... */
  guint *replies;             /* how many came in the test */
} Answer;

static void
store_answer (DBusPendingCall *pending,
              void            *data)
{
  Answer *answer = data;

  answer->reply = dbus_pending_call_steal_reply (pending);
  answer->rank = ++*answer->replies;
}

/* A's pending call to destination, answered into answer */
static void
call_pending (Fixture     *f,
              const char  *destination,
              Answer      *answer,
              guint       *replies)
{
  DBusMessage *m = new_call (destination, "Hang");
  DBusPendingCall *pending;

  answer->reply = NULL;
  answer->replies = replies;
  g_assert_true (dbus_connection_send_with_reply (f->a, m, &pending,
                                                  DBUS_TIMEOUT_INFINITE));
  g_assert_true (dbus_pending_call_set_notify (pending, store_answer, answer, NULL));
  dbus_pending_call_unref (pending);
  dbus_message_unref (m);
  pump (f);
}

/* Dispatches what A receives until it has *replies answers: only errors,
 * never the Departed signal */
static void
wait_for_errors (Fixture *f,
                 guint   *replies,
                 guint    expected)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;
  DBusMessage *m;

  while (*replies < expected)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      pump (f);
      m = dbus_connection_borrow_message (f->a);
      if (m == NULL)
        continue;
      g_assert_cmpint (dbus_message_get_type (m), ==, DBUS_MESSAGE_TYPE_ERROR);
      dbus_connection_return_message (f->a, m);
      dbus_connection_dispatch (f->a);
    }
}

/* answer is stock's NoReply error to A */
static void
assert_no_reply (Fixture *f,
                 Answer  *answer)
{
  DBusMessage *m = answer->reply;
  const char *text;

  g_assert_cmpint (dbus_message_get_type (m), ==, DBUS_MESSAGE_TYPE_ERROR);
  g_assert_cmpstr (dbus_message_get_error_name (m), ==, DBUS_ERROR_NO_REPLY);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, DBUS_SERVICE_DBUS);
  g_assert_cmpstr (dbus_message_get_destination (m), ==, f->a_name);
  g_assert_true (dbus_message_get_args (m, NULL, DBUS_TYPE_STRING, &text,
                                        DBUS_TYPE_INVALID));
  g_assert_cmpstr (text, ==, DBUS_MCAST_NO_REPLY_TEXT);
}

/* The daemon's Departed signal: A's pending calls to the departed member's
 * unique name, and to a well-known name the kernel gave that member (its
 * peer filter claimed the call), end with stock's NoReply error, newest
 * first; a call to a well-known name the kernel gave no member (the daemon
 * routed it, and answers it itself) and a call to someone else stay
 * pending, and so do all of them when another member leaves; the signal
 * itself is never dispatched; a second Departed, and the daemon's own
 * NoReply for a call already answered, change nothing.  One signal for
 * members that left together ends their calls in the order they left. */
static void
test_departed (Fixture *f, gconstpointer data)
{
  const char *together[] = { ":1.8", ":1.9" };
  const char *elsewhere[] = { ":1.7" };
  const char *b[1];
  Answer answers[5];
  guint replies = 0;
  DBusMessage *m;
  int i;

  if (g_test_failed () || f->a == NULL)
    return;

  claim_all (f->b_srv, TRUE);
  call_pending (f, f->b_name, &answers[0], &replies);
  call_pending (f, "org.dbusmcast.Test.Owned", &answers[1], &replies);
  claim_all (f->b_srv, FALSE);
  call_pending (f, "org.dbusmcast.Test.Routed", &answers[4], &replies);
  call_pending (f, together[1], &answers[2], &replies);
  for (i = 0; i < 3; i++)
    {
      m = next_message (f, f->b);
      g_assert_true (dbus_message_is_method_call (m, TEST_IFACE, "Hang"));
      dbus_message_unref (m);
    }

  send_departed (f, elsewhere, 1);
  assert_no_message (f, f->a, 100);
  g_assert_cmpuint (replies, ==, 0);

  b[0] = f->b_name;
  send_departed (f, b, 1);
  wait_for_errors (f, &replies, 2);
  for (i = 0; i < 2; i++)
    assert_no_reply (f, &answers[i]);
  /* newest first, as stock sends them, each numbered on from the signal */
  g_assert_cmpuint (answers[1].rank, ==, 1);
  g_assert_cmpuint (answers[0].rank, ==, 2);
  g_assert_cmpuint (dbus_message_get_serial (answers[0].reply), ==,
                    dbus_message_get_serial (answers[1].reply) + 1);

  send_departed (f, b, 1);
  m = driver_message (dbus_message_new_error (answers[0].reply, DBUS_ERROR_NO_REPLY,
                                              "late"), f->a_name);
  g_assert_true (dbus_message_set_reply_serial (m, dbus_message_get_reply_serial (answers[0].reply)));
  send_flush (f, f->a_srv, m);
  dbus_message_unref (m);
  assert_no_message (f, f->a, 100);
  g_assert_cmpuint (replies, ==, 2);
  g_assert_null (answers[2].reply);
  g_assert_null (answers[4].reply);

  call_pending (f, together[0], &answers[3], &replies);
  send_departed (f, together, G_N_ELEMENTS (together));
  wait_for_errors (f, &replies, 4);
  assert_no_reply (f, &answers[3]);
  assert_no_reply (f, &answers[2]);
  g_assert_cmpuint (answers[3].rank, ==, 3);
  g_assert_cmpuint (answers[2].rank, ==, 4);

  for (i = 0; i < 4; i++)
    dbus_message_unref (answers[i].reply);
}

/* While C waits for its Hello reply, the acceptor has admitted it
 * already: A writes to C's name (it learnt it from NameOwnerChanged, say) */
static void
a_writes_to_c (Fixture *f)
{
  DBusMessage *m = new_call (":1.3", "Early");

  dbus_message_set_no_reply (m, TRUE);
  send_flush (f, f->a, m);
  dbus_message_unref (m);
  /* the packet reaches C before the Hello reply: C reads it */
  pump_for (f, 100);
}

/* A group message that reaches a client between its admission and its
 * Hello reply is not lost: it is checked and delivered after the reply. */
static void
test_early_message (Fixture *f, gconstpointer data)
{
  DBusConnection *c, *c_srv;
  gchar *c_name;
  DBusMessage *m;

  if (g_test_failed () || f->a == NULL)
    return;

  c = open_client (f, 3, TRUE, a_writes_to_c, &c_srv, &c_name);
  m = next_message (f, c);
  g_assert_true (dbus_message_is_method_call (m, TEST_IFACE, "Early"));
  g_assert_cmpstr (dbus_message_get_sender (m), ==, f->a_name);
  dbus_message_unref (m);
  assert_no_message (f, c, 100);
  g_free (c_name);
}

#ifdef DBUS_ENABLE_EMBEDDED_TESTS
/* Longer than a packet: the daemon's end sends it in fragments */
#define LONG_ARGUMENT_LENGTH (DBUS_SEQPACKET_FRAGMENT_SIZE + 4000)

/* The member whose departure ends A's calls */
#define DEPARTING ":1.100"

typedef struct
{
  Fixture *f;
  dbus_uint32_t round;       /* of the messages A is to receive next */
  gchar *long_argument;
  DBusMessage *departed;     /* the daemon's Departed signal for DEPARTING */
} OomRun;

/* Sends @m on @c, again while libdbus finds no memory, and flushes */
static void
send_retrying (DBusConnection *c,
               DBusMessage    *m,
               dbus_uint32_t  *serial)
{
  while (!dbus_connection_send (c, m, serial))
    ;
  dbus_connection_flush (c);
}

/* The next message @c receives, read as it finds memory; NULL if none
 * came within 10 s or @c was disconnected */
static DBusMessage *
pop_within (DBusConnection *c)
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  DBusMessage *m;

  while ((m = dbus_connection_pop_message (c)) == NULL)
    {
      if (g_get_monotonic_time () > deadline ||
          !dbus_connection_get_is_connected (c))
        return NULL;
      dbus_connection_read_write (c, 0);
    }
  return m;
}

/* Sends the signal @member, numbered @round, to @destination on @c; a
 * step that finds no memory is tried again */
static void
send_numbered (DBusConnection *c,
               gboolean        from_daemon,
               const char     *destination,
               const char     *member,
               dbus_uint32_t   round,
               const char     *argument)
{
  DBusMessage *m;

  for (;;)
    {
      m = dbus_message_new_signal (TEST_PATH, TEST_IFACE, member);
      if (m != NULL &&
          dbus_message_set_destination (m, destination) &&
          (!from_daemon || dbus_message_set_sender (m, DBUS_SERVICE_DBUS)) &&
          dbus_message_append_args (m, DBUS_TYPE_UINT32, &round,
                                    DBUS_TYPE_STRING, &argument,
                                    DBUS_TYPE_INVALID))
        break;
      if (m != NULL)
        dbus_message_unref (m);
    }
  send_retrying (c, m, NULL);
  dbus_message_unref (m);
}

/* A group message from B, then a long one from "the daemon" */
static void
send_round (OomRun *run)
{
  Fixture *f = run->f;

  send_numbered (f->b, FALSE, f->a_name, "FromPeer", run->round, "peer");
  send_numbered (f->a_srv, TRUE, f->a_name, "FromDaemon", run->round,
                 run->long_argument);
}

/* Whether A receives the signal @member of this round next, with its
 * argument intact, within 10 s, however often it finds no memory */
static gboolean
receive_numbered (OomRun     *run,
                  const char *member,
                  const char *argument)
{
  DBusMessage *m = pop_within (run->f->a);
  DBusMessageIter iter;
  dbus_uint32_t round;
  const char *text;
  gboolean ok;

  if (m == NULL)
    {
      g_test_message ("round %u: %s never arrived", run->round, member);
      return FALSE;
    }

  ok = dbus_message_is_signal (m, TEST_IFACE, member) &&
       dbus_message_iter_init (m, &iter) &&
       dbus_message_iter_get_arg_type (&iter) == DBUS_TYPE_UINT32;
  if (ok)
    {
      dbus_message_iter_get_basic (&iter, &round);
      ok = round == run->round && dbus_message_iter_next (&iter) &&
           dbus_message_iter_get_arg_type (&iter) == DBUS_TYPE_STRING;
    }
  if (ok)
    {
      dbus_message_iter_get_basic (&iter, &text);
      ok = strcmp (text, argument) == 0;
    }
  if (!ok)
    g_test_message ("round %u: expected %s, got %s", run->round, member,
                    dbus_message_get_member (m));
  dbus_message_unref (m);
  return ok;
}

/* Reads and drops all that the acceptor's ends (SEND_TO_PEER copies) and
 * B got from the group: a full member would hold its senders back */
static void
drain_group_copies (Fixture *f)
{
  DBusConnection *ends[] = { f->a_srv, f->b_srv, f->b };
  struct pollfd p = { -1, POLLIN, 0 };
  DBusMessage *m;
  guint i;

  for (i = 0; i < G_N_ELEMENTS (ends); i++)
    {
      g_assert_true (dbus_connection_get_socket (ends[i], &p.fd));
      do
        {
          dbus_connection_read_write (ends[i], 0);
          while ((m = dbus_connection_pop_message (ends[i])) != NULL)
            dbus_message_unref (m);
        }
      while (poll (&p, 1, 0) == 1);
    }
}

/* One round under _dbus_test_oom_handling(): A receives what was sent
 * for it, then the next round is sent.  Allocations fail in turn, in A
 * and in the senders alike; whatever A had no memory for must arrive
 * once memory is back, once, and in order. */
static dbus_bool_t
receive_round (void        *data,
               dbus_bool_t  have_memory)
{
  OomRun *run = data;

  if (!receive_numbered (run, "FromPeer", "peer") ||
      !receive_numbered (run, "FromDaemon", run->long_argument))
    return FALSE;

  drain_group_copies (run->f);

  run->round++;
  send_round (run);
  return TRUE;
}

/* A call from A to a member that then leaves, under
 * _dbus_test_oom_handling(): "the daemon"'s Departed signal (@data of
 * the run, sent again each round) ends it with one NoReply error, however
 * often A had no memory to make the errors */
static dbus_bool_t
call_ends_with_departure (void        *data,
                          dbus_bool_t  have_memory)
{
  OomRun *run = data;
  Fixture *f = run->f;
  DBusMessage *m = NULL;
  dbus_uint32_t serial;
  gboolean ok;

  while (m == NULL)
    m = new_call (DEPARTING, "Hang");
  send_retrying (f->a, m, &serial);
  dbus_message_unref (m);
  send_retrying (f->a_srv, run->departed, NULL);

  m = pop_within (f->a);
  if (m == NULL)
    {
      g_test_message ("round %u: no NoReply error", run->round);
      return FALSE;
    }
  ok = dbus_message_is_error (m, DBUS_ERROR_NO_REPLY) &&
       dbus_message_get_reply_serial (m) == serial;
  if (!ok)
    g_test_message ("round %u: expected NoReply to %u, got %s to %u",
                    run->round, serial, dbus_message_get_member (m),
                    dbus_message_get_reply_serial (m));
  dbus_message_unref (m);

  /* The calls reached B and the acceptor through the group */
  drain_group_copies (f);
  run->round++;
  return ok;
}

/* A member that runs out of memory while it reads a group message or a
 * message from the daemon (loading it to check it, queuing the loaded
 * message, reassembling fragments) keeps it and reads nothing behind it
 * until memory is back, as stock libdbus keeps the bytes it could not
 * load: nothing is lost, duplicated or reordered. */
static void
test_out_of_memory (Fixture *f, gconstpointer data)
{
  OomRun run = { f, 0, NULL, NULL };

  if (g_test_failed () || f->a == NULL)
    return;

  run.long_argument = g_malloc (LONG_ARGUMENT_LENGTH + 1);
  memset (run.long_argument, 'x', LONG_ARGUMENT_LENGTH);
  run.long_argument[LONG_ARGUMENT_LENGTH] = '\0';

  send_round (&run);
  g_assert_true (_dbus_test_oom_handling ("a member receives", receive_round,
                                          &run));
  g_assert_cmpuint (run.round, >, 10);
  g_test_message ("%u rounds", run.round);

  /* The last round arrives, and nothing else */
  g_assert_true (receive_numbered (&run, "FromPeer", "peer"));
  g_assert_true (receive_numbered (&run, "FromDaemon", run.long_argument));
  assert_no_message (f, f->a, 100);
  g_free (run.long_argument);
}

/* A member out of memory when the daemon's Departed signal comes keeps
 * it, and its calls to the departed member still end with stock's
 * NoReply error, once each */
static void
test_out_of_memory_departed (Fixture *f, gconstpointer data)
{
  OomRun run = { f, 0, NULL, NULL };
  const char *departing[] = { DEPARTING };

  if (g_test_failed () || f->a == NULL)
    return;

  run.departed = departed_signal (f, departing, 1);

  g_assert_true (_dbus_test_oom_handling ("a call ends with a departure",
                                          call_ends_with_departure, &run));
  g_assert_cmpuint (run.round, >, 10);
  g_test_message ("%u rounds", run.round);
  assert_no_message (f, f->a, 100);
  dbus_message_unref (run.departed);
}
#endif

/* A server that does not offer multicast answers NEGOTIATE_MULTICAST with
 * ERROR; the client stays classic: everything goes to the server. */
static void
test_not_offered (Fixture *f, gconstpointer data)
{
  DBusMessage *m;

  if (g_test_failed () || f->a == NULL)
    return;

  /* open_client() checked _dbus_connection_get_mcast_negotiated() is
   * FALSE and Hello worked.  A message to B goes to the acceptor only. */
  m = new_call (f->b_name, "Classic");
  dbus_message_set_no_reply (m, TRUE);
  send_flush (f, f->a, m);
  dbus_message_unref (m);
  m = next_message (f, f->a_srv);
  g_assert_true (dbus_message_is_method_call (m, TEST_IFACE, "Classic"));
  g_assert_null (dbus_message_get_sender (m)); /* not a member: no SENDER */
  dbus_message_unref (m);
  assert_no_message (f, f->b, 100);
}

/* A calls B's method, expecting a reply unless no_reply: the serial */
static dbus_uint32_t
call_b (Fixture    *f,
        const char *method,
        gboolean    no_reply)
{
  DBusMessage *m = new_call (f->b_name, method);
  dbus_uint32_t serial;

  dbus_message_set_no_reply (m, no_reply);
  g_assert_true (dbus_connection_send (f->a, m, &serial));
  dbus_message_unref (m);
  pump (f);
  return serial;
}

/* The next message on c that calls method, passing over the others */
static DBusMessage *
next_call (Fixture        *f,
           DBusConnection *c,
           const char     *method)
{
  DBusMessage *m;

  while (!dbus_message_is_method_call (m = next_message (f, c), TEST_IFACE, method))
    dbus_message_unref (m);
  return m;
}

/* With the limit the daemon said, A's calls awaiting replies go to B
 * through the group up to the limit; the next one goes to the acceptor
 * alone, without SENDER, and A writes nothing more until its Routed
 * signal.  A call without reply is not counted.  Once the acceptor
 * refused the call and B answered one, there is room for one more. */
static void
test_reply_limit (Fixture *f, gconstpointer data)
{
  DBusMessage *m, *held, *reply;
  dbus_uint32_t serial;

  if (g_test_failed () || f->a == NULL)
    return;

  send_daemon_signal (f, f->a_srv, f->a_name, DBUS_MCAST_REPLY_LIMIT, 2);
  assert_no_message (f, f->a, 100);

  call_b (f, "First", FALSE);
  held = next_call (f, f->b, "First");
  call_b (f, "Second", FALSE);
  dbus_message_unref (next_call (f, f->b, "Second"));
  call_b (f, "Uncounted", TRUE);
  dbus_message_unref (next_call (f, f->b, "Uncounted"));

  serial = call_b (f, "Over", FALSE);
  m = next_call (f, f->a_srv, "Over");
  g_assert_null (dbus_message_get_sender (m));
  call_b (f, "Fenced", TRUE);
  assert_no_message (f, f->b, 200);

  reply = driver_message (dbus_message_new_error (m, DBUS_ERROR_LIMITS_EXCEEDED,
                                                  "over the limit"), f->a_name);
  dbus_message_unref (m);
  send_flush (f, f->a_srv, reply);
  dbus_message_unref (reply);
  send_routed (f, f->a_srv, f->a_name, serial);
  m = next_message (f, f->a);
  g_assert_cmpstr (dbus_message_get_error_name (m), ==, DBUS_ERROR_LIMITS_EXCEEDED);
  g_assert_cmpuint (dbus_message_get_reply_serial (m), ==, serial);
  dbus_message_unref (m);
  dbus_message_unref (next_call (f, f->b, "Fenced"));

  reply = dbus_message_new_method_return (held);
  dbus_message_unref (held);
  send_flush (f, f->b, reply);
  dbus_message_unref (reply);
  m = next_message (f, f->a);
  g_assert_cmpint (dbus_message_get_type (m), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  dbus_message_unref (m);

  call_b (f, "Room", FALSE);
  m = next_call (f, f->b, "Room");
  g_assert_cmpstr (dbus_message_get_sender (m), ==, f->a_name);
  dbus_message_unref (m);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  signal (SIGPIPE, SIG_IGN);
  dbus_threads_init_default ();

#define ADD(path, func, data) \
  g_test_add (path, Fixture, data, setup, func, teardown)

  ADD ("/mcast-member/unicast", test_unicast, NULL);
  ADD ("/mcast-member/raw-member", test_raw_member, NULL);
  ADD ("/mcast-member/routed/fd", test_routed, "fd");
  ADD ("/mcast-member/routed/large", test_routed, "large");
  ADD ("/mcast-member/broadcast", test_broadcast, NULL);
  ADD ("/mcast-member/departed", test_departed, NULL);
  ADD ("/mcast-member/owners", test_owners, NULL);
  ADD ("/mcast-member/reply-limit", test_reply_limit, NULL);
  ADD ("/mcast-member/early-message", test_early_message, NULL);
#ifdef DBUS_ENABLE_EMBEDDED_TESTS
  /* Only a libdbus built with --enable-embedded-tests can fail
   * allocations: test/bus/run runs that build's program for it */
  ADD ("/mcast-member/out-of-memory/receive", test_out_of_memory, NULL);
  ADD ("/mcast-member/out-of-memory/departed", test_out_of_memory_departed, NULL);
#endif
  ADD ("/mcast-member/not-offered", test_not_offered, "not offered");

  return g_test_run ();
}

#else /* !UNIX_PASSID */

/* Built against a <linux/un.h> without the multicast UAPI */
static void
test_no_uapi (void)
{
  g_test_skip ("built without the multicast AF_UNIX UAPI headers");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/mcast-member/uapi", test_no_uapi);
  return g_test_run ();
}

#endif
