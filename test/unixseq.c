/* test/unixseq.c  The unixseq: (SOCK_SEQPACKET) transport against a real
 * dbus-daemon from the dbus-mcast build, classic routing.
 *
 * Every test starts its own dbus-daemon (build/dbus-stage) listening on a
 * stream address and on a SOCK_SEQPACKET address at once, and talks to it
 * with the staged libdbus (and, for the compatibility tests, with the
 * staged tools and the system's unmodified GDBus, sd-bus and libdbus).
 *
 * Environment: DBUS_MCAST_STAGE is the staging prefix (the fork's make
 * check sets it to the build's prefix).
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>

#include <dbus/dbus.h>
#include <dbus/dbus-connection-internal.h>
#include <dbus/dbus-seqpacket-io.h>
#include <dbus/dbus-server-socket.h>
#include <glib.h>

#include "test-utils-glib.h"
#include <glib/gstdio.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define TIMEOUT_US (60 * G_USEC_PER_SEC)

/* Every sendmsg() of this process, libdbus's included, goes through this
 * definition: /seqpacket/write-blocked counts them. */
static volatile gint n_sendmsg;

ssize_t
sendmsg (int                  fd,
         const struct msghdr *msg,
         int                  flags)
{
  g_atomic_int_inc (&n_sendmsg);
  return syscall (SYS_sendmsg, fd, msg, flags);
}
#define TEST_IFACE "org.dbusmcast.Test"
#define TEST_PATH "/org/dbusmcast/Test"

typedef struct
{
  gchar *tmpdir;
  gchar *config;
  GPid daemon_pid;
  gchar *full_address;
  gchar *seq_address;
  gchar *stream_address;
  gchar *seq_path;
  gchar *daemon_log;
} Fixture;

static const gchar *
stage_dir (void)
{
  const gchar *s = g_getenv ("DBUS_MCAST_STAGE");

  if (s == NULL)
    g_error ("DBUS_MCAST_STAGE must name the staged dbus (make check sets it)");
  return s;
}

static gchar *
stage_file (const gchar *rel)
{
  return g_build_filename (stage_dir (), rel, NULL);
}

static gchar *
write_config (const gchar *dir)
{
  gchar *path = g_build_filename (dir, "bus.conf", NULL);
  gchar *text = g_strdup_printf (
      "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n"
      " \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n"
      "<busconfig>\n"
      "  <type>session</type>\n"
      "  <listen>unix:dir=%s</listen>\n"
      "  <listen>unixseq:dir=%s</listen>\n"
      "  <policy context=\"default\">\n"
      "    <allow send_destination=\"*\" eavesdrop=\"true\"/>\n"
      "    <allow eavesdrop=\"true\"/>\n"
      "    <allow own=\"*\"/>\n"
      "  </policy>\n"
      "  <limit name=\"max_incoming_bytes\">1000000000</limit>\n"
      "  <limit name=\"max_outgoing_bytes\">1000000000</limit>\n"
      "  <limit name=\"max_message_size\">1000000000</limit>\n"
      "  <limit name=\"max_completed_connections\">100000</limit>\n"
      "  <limit name=\"max_incomplete_connections\">10000</limit>\n"
      "  <limit name=\"max_connections_per_user\">100000</limit>\n"
      "</busconfig>\n", dir, dir);
  GError *error = NULL;

  g_file_set_contents (path, text, -1, &error);
  g_assert_no_error (error);
  g_free (text);
  return path;
}

/* A daemon must not outlive a test that failed half-way; with data, its
 * stderr (where it logs) goes to that file */
static void
die_with_parent (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGTERM);
  if (data != NULL)
    {
      int fd = open (data, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

      if (fd >= 0)
        dup2 (fd, 2);
    }
}

static void
setup (Fixture       *f,
       gconstpointer  data)
{
  GError *error = NULL;
  gchar *daemon = stage_file ("bin/dbus-daemon");
  gchar *config_arg;
  const gchar *argv[] = { daemon, NULL, "--print-address=1", "--nofork", NULL };
  gint out_fd;
  GString *line = g_string_new (NULL);
  gchar **entries;
  gint i;
  DBusError derror = DBUS_ERROR_INIT;
  DBusAddressEntry **parsed;
  int n_parsed;

  f->tmpdir = g_dir_make_tmp ("dbus-mcast-test-XXXXXX", &error);
  g_assert_no_error (error);
  f->config = write_config (f->tmpdir);
  f->daemon_log = g_build_filename (f->tmpdir, "daemon.log", NULL);
  config_arg = g_strdup_printf ("--config-file=%s", f->config);
  argv[1] = config_arg;

  /* DBUS_MCAST_DAEMON_WRAPPER, e.g. "valgrind --log-file=...": run the
   * daemon under a checker */
  if (g_getenv ("DBUS_MCAST_DAEMON_WRAPPER") != NULL)
    {
      gchar **wrapper = g_strsplit (g_getenv ("DBUS_MCAST_DAEMON_WRAPPER"), " ", -1);
      GPtrArray *full = g_ptr_array_new ();
      guint j;

      for (j = 0; wrapper[j] != NULL; j++)
        g_ptr_array_add (full, wrapper[j]);
      for (j = 0; argv[j] != NULL; j++)
        g_ptr_array_add (full, (gchar *) argv[j]);
      g_ptr_array_add (full, NULL);
      g_spawn_async_with_pipes (NULL, (gchar **) full->pdata, NULL,
                                G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_SEARCH_PATH,
                                die_with_parent, f->daemon_log, &f->daemon_pid,
                                NULL, &out_fd, NULL, &error);
      g_ptr_array_free (full, TRUE);
      g_strfreev (wrapper);
    }
  else
    g_spawn_async_with_pipes (NULL, (gchar **) argv, NULL,
                              G_SPAWN_DO_NOT_REAP_CHILD,
                              die_with_parent, f->daemon_log, &f->daemon_pid, NULL,
                              &out_fd, NULL, &error);
  g_assert_no_error (error);

  /* The address line: both entries, SEQPACKET first (later <listen> wins) */
  while (TRUE)
    {
      char c;
      ssize_t r = read (out_fd, &c, 1);

      if (r < 0 && errno == EINTR)
        continue;
      g_assert_cmpint (r, ==, 1);
      if (c == '\n')
        break;
      g_string_append_c (line, c);
    }
  close (out_fd);

  f->full_address = g_string_free (line, FALSE);
  entries = g_strsplit (f->full_address, ";", -1);
  for (i = 0; entries[i] != NULL; i++)
    {
      if (g_str_has_prefix (entries[i], "unixseq:"))
        f->seq_address = g_strdup (entries[i]);
      else if (g_str_has_prefix (entries[i], "unix:"))
        f->stream_address = g_strdup (entries[i]);
    }
  g_strfreev (entries);
  g_assert_nonnull (f->seq_address);
  g_assert_nonnull (f->stream_address);
  g_assert_true (g_str_has_prefix (f->full_address, "unixseq:"));

  g_assert_true (dbus_parse_address (f->seq_address, &parsed, &n_parsed, &derror));
  test_assert_no_error (&derror);
  g_assert_cmpint (n_parsed, ==, 1);
  f->seq_path = g_strdup (dbus_address_entry_get_value (parsed[0], "path"));
  g_assert_nonnull (f->seq_path);
  dbus_address_entries_free (parsed);

  g_free (config_arg);
  g_free (daemon);
}

static gboolean
daemon_alive (Fixture *f)
{
  return waitpid (f->daemon_pid, NULL, WNOHANG) == 0;
}

static void
teardown (Fixture       *f,
          gconstpointer  data)
{
  /* Whatever the test did, the daemon must still be running */
  g_assert_true (daemon_alive (f));
  kill (f->daemon_pid, SIGTERM);
  waitpid (f->daemon_pid, NULL, 0);
  g_spawn_close_pid (f->daemon_pid);

  {
    gchar *log = NULL;

    if (g_file_get_contents (f->daemon_log, &log, NULL, NULL) && log[0] != '\0')
      g_test_message ("dbus-daemon's log:\n%s", log);
    g_free (log);
  }
  g_unlink (f->daemon_log);
  g_free (f->daemon_log);
  g_unlink (f->config);
  g_unlink (f->seq_path);
  g_rmdir (f->tmpdir);
  g_free (f->tmpdir);
  g_free (f->config);
  g_free (f->full_address);
  g_free (f->seq_address);
  g_free (f->stream_address);
  g_free (f->seq_path);
}

/* ---- client helpers ---------------------------------------------------- */

static DBusConnection *
connect_bus (const gchar *address)
{
  DBusError error = DBUS_ERROR_INIT;
  DBusConnection *c;

  c = dbus_connection_open_private (address, &error);
  test_assert_no_error (&error);
  g_assert_nonnull (c);
  dbus_connection_set_exit_on_disconnect (c, FALSE);
  dbus_connection_set_max_received_size (c, 1000000000);
  dbus_connection_set_max_message_size (c, 1000000000);
  g_assert_true (dbus_bus_register (c, &error));
  test_assert_no_error (&error);
  g_assert_nonnull (dbus_bus_get_unique_name (c));
  return c;
}

static void
disconnect_bus (DBusConnection *c)
{
  dbus_connection_close (c);
  dbus_connection_unref (c);
}

static int
socket_type (DBusConnection *c)
{
  int fd = -1;
  int type = 0;
  socklen_t len = sizeof (type);

  g_assert_true (dbus_connection_get_socket (c, &fd));
  g_assert_cmpint (getsockopt (fd, SOL_SOCKET, SO_TYPE, &type, &len), ==, 0);
  return type;
}

typedef gboolean (*MessagePredicate) (DBusMessage *m, gconstpointer data);

/* Reads until a message matching pred arrives; drops other messages */
static DBusMessage *
wait_for_message (DBusConnection   *c,
                  MessagePredicate  pred,
                  gconstpointer     data)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;

  while (TRUE)
    {
      DBusMessage *m;

      while ((m = dbus_connection_pop_message (c)) != NULL)
        {
          if (pred (m, data))
            return m;
          dbus_message_unref (m);
        }

      if (g_get_monotonic_time () > deadline)
        g_error ("timed out waiting for a message");
      g_assert_true (dbus_connection_read_write (c, 100));
    }
}

static gboolean
is_method_call (DBusMessage *m, gconstpointer member)
{
  return dbus_message_is_method_call (m, TEST_IFACE, member);
}

static gboolean
is_signal (DBusMessage *m, gconstpointer member)
{
  return dbus_message_is_signal (m, TEST_IFACE, member);
}

static gboolean
is_reply_to (DBusMessage *m, gconstpointer serial)
{
  return dbus_message_get_reply_serial (m) == GPOINTER_TO_UINT (serial);
}

/* Sends msg from c, flushing it completely; returns its serial */
static dbus_uint32_t
send_flush (DBusConnection *c,
            DBusMessage    *msg)
{
  dbus_uint32_t serial = 0;

  g_assert_true (dbus_connection_send (c, msg, &serial));
  dbus_connection_flush (c);
  g_assert_true (dbus_connection_get_is_connected (c));
  return serial;
}

static void
add_match (DBusConnection *c,
           const gchar    *rule)
{
  DBusError error = DBUS_ERROR_INIT;

  dbus_bus_add_match (c, rule, &error);
  test_assert_no_error (&error);
}

/* ---- tests ------------------------------------------------------------- */

static void
test_hello (Fixture *f, gconstpointer data)
{
  DBusConnection *seq = connect_bus (f->seq_address);
  DBusConnection *stream = connect_bus (f->stream_address);
  DBusConnection *first = connect_bus (f->full_address);
  DBusError error = DBUS_ERROR_INIT;
  char *id;

  g_assert_cmpint (socket_type (seq), ==, SOCK_SEQPACKET);
  g_assert_cmpint (socket_type (stream), ==, SOCK_STREAM);
  /* With the whole address, libdbus takes the first entry: SEQPACKET */
  g_assert_cmpint (socket_type (first), ==, SOCK_SEQPACKET);
  g_assert_true (g_str_has_prefix (dbus_bus_get_unique_name (seq), ":1."));
  g_assert_cmpstr (dbus_bus_get_unique_name (seq), !=,
                   dbus_bus_get_unique_name (stream));
  g_assert_true (dbus_connection_can_send_type (seq, DBUS_TYPE_UNIX_FD));

  /* A bus driver call answered over the packet socket */
  id = dbus_bus_get_id (seq, &error);
  test_assert_no_error (&error);
  g_assert_cmpuint (strlen (id), ==, 32);
  dbus_free (id);

  disconnect_bus (seq);
  disconnect_bus (stream);
  disconnect_bus (first);
}

/* caller calls Echo(s) on server by unique name; server replies */
static void
method_roundtrip (DBusConnection *caller,
                  DBusConnection *server,
                  const gchar    *text)
{
  DBusMessage *call;
  DBusMessage *got;
  DBusMessage *reply;
  const char *arg = NULL;
  dbus_uint32_t serial;

  call = dbus_message_new_method_call (dbus_bus_get_unique_name (server),
                                       TEST_PATH, TEST_IFACE, "Echo");
  g_assert_true (dbus_message_append_args (call, DBUS_TYPE_STRING, &text,
                                           DBUS_TYPE_INVALID));
  serial = send_flush (caller, call);
  dbus_message_unref (call);

  got = wait_for_message (server, is_method_call, "Echo");
  g_assert_cmpstr (dbus_message_get_sender (got), ==,
                   dbus_bus_get_unique_name (caller));
  g_assert_true (dbus_message_get_args (got, NULL, DBUS_TYPE_STRING, &arg,
                                        DBUS_TYPE_INVALID));
  g_assert_cmpstr (arg, ==, text);
  reply = dbus_message_new_method_return (got);
  g_assert_true (dbus_message_append_args (reply, DBUS_TYPE_STRING, &arg,
                                           DBUS_TYPE_INVALID));
  send_flush (server, reply);
  dbus_message_unref (reply);
  dbus_message_unref (got);

  got = wait_for_message (caller, is_reply_to, GUINT_TO_POINTER (serial));
  g_assert_cmpint (dbus_message_get_type (got), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  g_assert_cmpstr (dbus_message_get_sender (got), ==,
                   dbus_bus_get_unique_name (server));
  g_assert_true (dbus_message_get_args (got, NULL, DBUS_TYPE_STRING, &arg,
                                        DBUS_TYPE_INVALID));
  g_assert_cmpstr (arg, ==, text);
  dbus_message_unref (got);
}

static void
test_method_call (Fixture *f, gconstpointer data)
{
  DBusConnection *seq = connect_bus (f->seq_address);
  DBusConnection *seq2 = connect_bus (f->seq_address);
  DBusConnection *stream = connect_bus (f->stream_address);
  DBusError error = DBUS_ERROR_INIT;
  DBusMessage *call;
  DBusMessage *reply;

  method_roundtrip (stream, seq, "stream to seqpacket");
  method_roundtrip (seq, stream, "seqpacket to stream");
  method_roundtrip (seq, seq2, "seqpacket to seqpacket");

  /* Well-known names work across both kinds too */
  g_assert_cmpint (dbus_bus_request_name (seq, "org.dbusmcast.SeqService", 0, &error),
                   ==, DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  test_assert_no_error (&error);
  g_assert_true (dbus_bus_name_has_owner (stream, "org.dbusmcast.SeqService", &error));
  test_assert_no_error (&error);

  /* Errors from the bus driver reach a SEQPACKET client */
  call = dbus_message_new_method_call ("org.dbusmcast.Nobody", TEST_PATH,
                                       TEST_IFACE, "Echo");
  reply = dbus_connection_send_with_reply_and_block (seq, call, 10000, &error);
  g_assert_null (reply);
  g_assert_cmpstr (error.name, ==, DBUS_ERROR_SERVICE_UNKNOWN);
  dbus_error_free (&error);
  dbus_message_unref (call);

  disconnect_bus (seq);
  disconnect_bus (seq2);
  disconnect_bus (stream);
}

static void
signal_once (DBusConnection *emitter,
             DBusConnection *receiver,
             const gchar    *member)
{
  DBusMessage *sig;
  DBusMessage *got;
  dbus_uint32_t value = 0xdb05;
  dbus_uint32_t seen = 0;

  sig = dbus_message_new_signal (TEST_PATH, TEST_IFACE, member);
  g_assert_true (dbus_message_append_args (sig, DBUS_TYPE_UINT32, &value,
                                           DBUS_TYPE_INVALID));
  send_flush (emitter, sig);
  dbus_message_unref (sig);

  got = wait_for_message (receiver, is_signal, member);
  g_assert_cmpstr (dbus_message_get_sender (got), ==,
                   dbus_bus_get_unique_name (emitter));
  g_assert_true (dbus_message_get_args (got, NULL, DBUS_TYPE_UINT32, &seen,
                                        DBUS_TYPE_INVALID));
  g_assert_cmpuint (seen, ==, value);
  dbus_message_unref (got);
}

static void
test_signals (Fixture *f, gconstpointer data)
{
  DBusConnection *seq = connect_bus (f->seq_address);
  DBusConnection *stream = connect_bus (f->stream_address);
  const gchar *rule = "type='signal',interface='" TEST_IFACE "'";
  int i;

  add_match (seq, rule);
  add_match (stream, rule);

  signal_once (seq, stream, "FromSeqpacket");
  signal_once (stream, seq, "FromStream");

  /* Ordering: a burst from one sender arrives in order on the other kind */
  for (i = 0; i < 200; i++)
    {
      DBusMessage *sig = dbus_message_new_signal (TEST_PATH, TEST_IFACE, "Seq");
      dbus_uint32_t v = i;

      g_assert_true (dbus_message_append_args (sig, DBUS_TYPE_UINT32, &v,
                                               DBUS_TYPE_INVALID));
      g_assert_true (dbus_connection_send (seq, sig, NULL));
      dbus_message_unref (sig);
    }
  dbus_connection_flush (seq);
  for (i = 0; i < 200; i++)
    {
      DBusMessage *got = wait_for_message (stream, is_signal, "Seq");
      dbus_uint32_t v = 0;

      g_assert_true (dbus_message_get_args (got, NULL, DBUS_TYPE_UINT32, &v,
                                            DBUS_TYPE_INVALID));
      g_assert_cmpuint (v, ==, (dbus_uint32_t) i);
      dbus_message_unref (got);
    }

  disconnect_bus (seq);
  disconnect_bus (stream);
}

/* A sender whose socket is full (dbus-daemon stopped) queues what it
 * sends without trying to write each message again, and once the daemon
 * reads again, everything arrives in order. */
static void
test_write_blocked (Fixture *f, gconstpointer data)
{
  DBusConnection *seq = connect_bus (f->seq_address);
  DBusConnection *stream = connect_bus (f->stream_address);
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;
  guint sent = 0, i, before;

  add_match (stream, "type='signal',interface='" TEST_IFACE "'");
  g_assert_cmpint (kill (f->daemon_pid, SIGSTOP), ==, 0);

  /* Until a write fails and the message stays queued */
  while (!dbus_connection_has_messages_to_send (seq))
    {
      DBusMessage *sig = dbus_message_new_signal (TEST_PATH, TEST_IFACE, "Seq");

      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_assert_true (dbus_message_append_args (sig, DBUS_TYPE_UINT32, &sent,
                                               DBUS_TYPE_INVALID));
      g_assert_true (dbus_connection_send (seq, sig, NULL));
      dbus_message_unref (sig);
      sent++;
    }

  before = g_atomic_int_get (&n_sendmsg);
  for (i = 0; i < 100; i++, sent++)
    {
      DBusMessage *sig = dbus_message_new_signal (TEST_PATH, TEST_IFACE, "Seq");

      g_assert_true (dbus_message_append_args (sig, DBUS_TYPE_UINT32, &sent,
                                               DBUS_TYPE_INVALID));
      g_assert_true (dbus_connection_send (seq, sig, NULL));
      dbus_message_unref (sig);
    }
  g_assert_cmpint (g_atomic_int_get (&n_sendmsg), ==, before);

  g_assert_cmpint (kill (f->daemon_pid, SIGCONT), ==, 0);
  dbus_connection_flush (seq);
  g_assert_false (dbus_connection_has_messages_to_send (seq));
  for (i = 0; i < sent; i++)
    {
      DBusMessage *got = wait_for_message (stream, is_signal, "Seq");
      dbus_uint32_t v = 0;

      g_assert_true (dbus_message_get_args (got, NULL, DBUS_TYPE_UINT32, &v,
                                            DBUS_TYPE_INVALID));
      g_assert_cmpuint (v, ==, i);
      dbus_message_unref (got);
    }

  disconnect_bus (seq);
  disconnect_bus (stream);
}

static void
fd_roundtrip (DBusConnection *sender,
              DBusConnection *receiver)
{
  int pipe_fds[2];
  DBusMessage *call;
  DBusMessage *got;
  int received = -1;
  struct stat a, b;
  char buf[32] = { 0 };
  const char text[] = "through the bus";

  g_assert_cmpint (pipe (pipe_fds), ==, 0);
  call = dbus_message_new_method_call (dbus_bus_get_unique_name (receiver),
                                       TEST_PATH, TEST_IFACE, "TakeFd");
  g_assert_true (dbus_message_append_args (call, DBUS_TYPE_UNIX_FD, &pipe_fds[0],
                                           DBUS_TYPE_INVALID));
  dbus_message_set_no_reply (call, TRUE);
  send_flush (sender, call);
  dbus_message_unref (call);
  close (pipe_fds[0]);

  got = wait_for_message (receiver, is_method_call, "TakeFd");
  g_assert_true (dbus_message_get_args (got, NULL, DBUS_TYPE_UNIX_FD, &received,
                                        DBUS_TYPE_INVALID));
  dbus_message_unref (got);
  g_assert_cmpint (received, >=, 0);

  /* The same pipe, and it carries data */
  g_assert_cmpint (fstat (received, &a), ==, 0);
  g_assert_cmpint (fstat (pipe_fds[1], &b), ==, 0);
  g_assert_cmpuint (a.st_ino, ==, b.st_ino);
  g_assert_cmpint (write (pipe_fds[1], text, sizeof (text)), ==, sizeof (text));
  g_assert_cmpint (read (received, buf, sizeof (buf)), ==, sizeof (text));
  g_assert_cmpstr (buf, ==, text);
  close (received);
  close (pipe_fds[1]);
}

static void
test_fd_passing (Fixture *f, gconstpointer data)
{
  DBusConnection *seq = connect_bus (f->seq_address);
  DBusConnection *seq2 = connect_bus (f->seq_address);
  DBusConnection *stream = connect_bus (f->stream_address);

  g_assert_true (dbus_connection_can_send_type (seq, DBUS_TYPE_UNIX_FD));
  fd_roundtrip (seq, stream);
  fd_roundtrip (stream, seq);
  fd_roundtrip (seq, seq2);

  disconnect_bus (seq);
  disconnect_bus (seq2);
  disconnect_bus (stream);
}

static guchar
pattern_byte (gsize i, guint seed)
{
  return (guchar) ((i * 2654435761u + seed) >> 13);
}

/* sender sends a byte array of len bytes to receiver; checks every byte */
static void
big_roundtrip (DBusConnection *sender,
               DBusConnection *receiver,
               gsize           len,
               guint           seed)
{
  guchar *data = g_malloc (len);
  const guchar *got_data = NULL;
  int got_len = 0;
  DBusMessage *call;
  DBusMessage *got;
  gsize i;

  for (i = 0; i < len; i++)
    data[i] = pattern_byte (i, seed);

  call = dbus_message_new_method_call (dbus_bus_get_unique_name (receiver),
                                       TEST_PATH, TEST_IFACE, "Big");
  g_assert_true (dbus_message_append_args (call, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE,
                                           &data, (int) len, DBUS_TYPE_INVALID));
  dbus_message_set_no_reply (call, TRUE);
  send_flush (sender, call);
  dbus_message_unref (call);

  got = wait_for_message (receiver, is_method_call, "Big");
  g_assert_true (dbus_message_get_args (got, NULL, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE,
                                        &got_data, &got_len, DBUS_TYPE_INVALID));
  g_assert_cmpint (got_len, ==, (int) len);
  g_assert_true (memcmp (got_data, data, len) == 0);
  dbus_message_unref (got);
  g_free (data);
}

static void
test_large_64mib (Fixture *f, gconstpointer data)
{
  DBusConnection *seq = connect_bus (f->seq_address);
  DBusConnection *seq2 = connect_bus (f->seq_address);
  DBusConnection *stream = connect_bus (f->stream_address);
  /* The largest array D-Bus allows: 64 MiB; the message is a little more */
  gsize len = DBUS_MAXIMUM_ARRAY_LENGTH;

  g_assert_cmpuint (len, ==, 64 * 1024 * 1024);
  big_roundtrip (seq, stream, len, 1);
  big_roundtrip (stream, seq, len, 2);
  big_roundtrip (seq, seq2, len, 3);

  disconnect_bus (seq);
  disconnect_bus (seq2);
  disconnect_bus (stream);
}

static void
test_fragment_boundaries (Fixture *f, gconstpointer data)
{
  DBusConnection *seq = connect_bus (f->seq_address);
  DBusConnection *seq2 = connect_bus (f->seq_address);
  /* Array lengths putting the message just below, at and above one and
   * two fragments (the header is a little over 100 bytes) */
  gsize sizes[] = { 0, 1, DBUS_SEQPACKET_FRAGMENT_SIZE - 200, DBUS_SEQPACKET_FRAGMENT_SIZE - 150,
                    DBUS_SEQPACKET_FRAGMENT_SIZE - 120, DBUS_SEQPACKET_FRAGMENT_SIZE - 100, DBUS_SEQPACKET_FRAGMENT_SIZE,
                    DBUS_SEQPACKET_FRAGMENT_SIZE + 1, 2 * DBUS_SEQPACKET_FRAGMENT_SIZE - 130,
                    2 * DBUS_SEQPACKET_FRAGMENT_SIZE, 3 * DBUS_SEQPACKET_FRAGMENT_SIZE + 7 };
  gsize i;
  int delta;

  for (i = 0; i < G_N_ELEMENTS (sizes); i++)
    for (delta = 0; delta < 48; delta += (sizes[i] > 1000 ? 1 : 48))
      big_roundtrip (seq, seq2, sizes[i] + delta, i);

  disconnect_bus (seq);
  disconnect_bus (seq2);
}

/* A send buffer smaller than one fragment (as with a small
 * net.core.wmem_default): the transport raises it instead of failing */
static void
test_small_sndbuf (Fixture *f, gconstpointer data)
{
  DBusConnection *seq = connect_bus (f->seq_address);
  DBusConnection *seq2 = connect_bus (f->seq_address);
  int fd = -1;
  int size = 8192;
  socklen_t len = sizeof (size);

  g_assert_true (dbus_connection_get_socket (seq, &fd));
  g_assert_cmpint (setsockopt (fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof (size)), ==, 0);
  g_assert_cmpint (getsockopt (fd, SOL_SOCKET, SO_SNDBUF, &size, &len), ==, 0);
  g_assert_cmpint (size, <, DBUS_SEQPACKET_FRAGMENT_SIZE);

  big_roundtrip (seq, seq2, 3 * DBUS_SEQPACKET_FRAGMENT_SIZE, 7);

  g_assert_cmpint (getsockopt (fd, SOL_SOCKET, SO_SNDBUF, &size, &len), ==, 0);
  g_assert_cmpint (size, >, DBUS_SEQPACKET_FRAGMENT_SIZE);

  disconnect_bus (seq);
  disconnect_bus (seq2);
}

/* ---- raw SOCK_SEQPACKET peers ------------------------------------------ */

static void
send_packet (int fd, const void *data, gsize len)
{
  g_assert_cmpint (send (fd, data, len, MSG_NOSIGNAL), ==, (gssize) len);
}

/* Reads one packet into buf; returns its length (0 at EOF) */
static gssize
recv_packet (int fd, gchar *buf, gsize size, int timeout_ms)
{
  struct pollfd p = { fd, POLLIN, 0 };
  gssize r;

  g_assert_cmpint (poll (&p, 1, timeout_ms), ==, 1);
  r = recv (fd, buf, size, 0);
  if (r < 0 && errno == ECONNRESET)
    return 0;
  g_assert_cmpint (r, >=, 0);
  return r;
}

/* Connects to path and authenticates with EXTERNAL by hand; with
 * multicast, then asks for it and returns the answer's first word in
 * *answer (to be freed).  Sends BEGIN. */
static int
raw_connect_to (const gchar *path, gboolean multicast, gchar **answer)
{
  struct sockaddr_un addr = { AF_UNIX, { 0 } };
  int fd = socket (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  gchar *uid = g_strdup_printf ("%u", (unsigned) getuid ());
  GString *auth = g_string_new ("AUTH EXTERNAL ");
  gchar buf[512];
  gssize n;
  const gchar *p;

  g_assert_cmpint (fd, >=, 0);
  g_strlcpy (addr.sun_path, path, sizeof (addr.sun_path));
  g_assert_cmpint (connect (fd, (struct sockaddr *) &addr, sizeof (addr)), ==, 0);

  for (p = uid; *p != '\0'; p++)
    g_string_append_printf (auth, "%02x", (guchar) *p);
  g_string_append (auth, "\r\n");

  send_packet (fd, "", 1);
  send_packet (fd, auth->str, auth->len);
  n = recv_packet (fd, buf, sizeof (buf) - 1, 10000);
  buf[n] = '\0';
  g_assert_true (g_str_has_prefix (buf, "OK "));
  if (multicast)
    {
      send_packet (fd, "NEGOTIATE_MULTICAST\r\n", 21);
      n = recv_packet (fd, buf, sizeof (buf) - 1, 10000);
      buf[n] = '\0';
      *answer = g_strndup (buf, strcspn (buf, " \r\n"));
    }
  send_packet (fd, "BEGIN\r\n", 7);

  g_string_free (auth, TRUE);
  g_free (uid);
  return fd;
}

/* Connects to the daemon, authenticates with EXTERNAL and sends BEGIN by
 * hand */
static int
raw_connect (Fixture *f)
{
  return raw_connect_to (f->seq_path, FALSE, NULL);
}

static gchar *
marshal_call (const gchar *member, dbus_uint32_t serial, int *len)
{
  DBusMessage *m = dbus_message_new_method_call (DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                                                 DBUS_INTERFACE_DBUS, member);
  char *bytes = NULL;
  gchar *copy;

  dbus_message_set_serial (m, serial);
  g_assert_true (dbus_message_marshal (m, &bytes, len));
  copy = g_memdup2 (bytes, *len);
  dbus_free (bytes);
  dbus_message_unref (m);
  return copy;
}

/* Reads packets until the reply to serial; each packet must be exactly
 * one message (the daemon's side of the framing). */
static DBusMessage *
raw_wait_reply (int fd, dbus_uint32_t serial)
{
  gchar *buf = g_malloc (DBUS_SEQPACKET_FRAGMENT_SIZE);

  while (TRUE)
    {
      gssize n = recv_packet (fd, buf, DBUS_SEQPACKET_FRAGMENT_SIZE, 10000);
      DBusError error = DBUS_ERROR_INIT;
      DBusMessage *m;

      g_assert_cmpint (n, >, 0);
      g_assert_cmpint (dbus_message_demarshal_bytes_needed (buf, n), ==, n);
      m = dbus_message_demarshal (buf, n, &error);
      test_assert_no_error (&error);
      if (dbus_message_get_reply_serial (m) == serial)
        {
          g_free (buf);
          return m;
        }
      dbus_message_unref (m);
    }
}

/* Waits until the daemon closes fd, discarding what it still sends */
static void
raw_wait_closed (int fd)
{
  gchar *buf = g_malloc (DBUS_SEQPACKET_FRAGMENT_SIZE);
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;

  while (recv_packet (fd, buf, DBUS_SEQPACKET_FRAGMENT_SIZE, 10000) > 0)
    g_assert_cmpint (g_get_monotonic_time (), <, deadline);
  g_free (buf);
}

typedef enum
{
  BAD_TRUNCATED,
  BAD_GARBAGE,
  BAD_TWO_IN_ONE,
  BAD_TOO_SHORT,
  BAD_OVERSIZED,
  BAD_SHORT_FRAGMENT
} BadPacket;

static gboolean
is_name_lost_by (DBusMessage *m, gconstpointer name)
{
  const char *n = NULL, *old_owner = NULL, *new_owner = NULL;

  if (!dbus_message_is_signal (m, DBUS_INTERFACE_DBUS, "NameOwnerChanged"))
    return FALSE;
  g_assert_true (dbus_message_get_args (m, NULL, DBUS_TYPE_STRING, &n,
                                        DBUS_TYPE_STRING, &old_owner,
                                        DBUS_TYPE_STRING, &new_owner,
                                        DBUS_TYPE_INVALID));
  return strcmp (n, name) == 0 && new_owner[0] == '\0';
}

static void
test_malformed (Fixture *f, gconstpointer data)
{
  BadPacket kind = GPOINTER_TO_INT (data);
  DBusConnection *observer = connect_bus (f->stream_address);
  DBusConnection *seq = connect_bus (f->seq_address);
  DBusMessage *reply;
  DBusMessage *lost;
  const char *unique = NULL;
  gchar *unique_copy;
  int fd;
  int len;
  gchar *msg;
  DBusError error = DBUS_ERROR_INIT;
  char *id;

  add_match (observer, "type='signal',interface='" DBUS_INTERFACE_DBUS
             "',member='NameOwnerChanged'");

  /* A hand-made client gets on the bus properly first */
  fd = raw_connect (f);
  msg = marshal_call ("Hello", 1, &len);
  send_packet (fd, msg, len);
  g_free (msg);
  reply = raw_wait_reply (fd, 1);
  g_assert_true (dbus_message_get_args (reply, NULL, DBUS_TYPE_STRING, &unique,
                                        DBUS_TYPE_INVALID));
  unique_copy = g_strdup (unique);
  dbus_message_unref (reply);

  /* ... and still works before it misbehaves */
  msg = marshal_call ("GetId", 2, &len);
  send_packet (fd, msg, len);
  reply = raw_wait_reply (fd, 2);
  g_assert_cmpint (dbus_message_get_type (reply), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  dbus_message_unref (reply);

  switch (kind)
    {
    case BAD_TRUNCATED:
      /* A message cut short: the rest never comes in its packet */
      send_packet (fd, msg, len - 8);
      break;
    case BAD_GARBAGE:
      {
        gchar junk[64];

        memset (junk, 'x', sizeof (junk));
        send_packet (fd, junk, sizeof (junk));
      }
      break;
    case BAD_TWO_IN_ONE:
      {
        gchar *two = g_malloc (2 * len);

        memcpy (two, msg, len);
        memcpy (two + len, msg, len);
        send_packet (fd, two, 2 * len);
        g_free (two);
      }
      break;
    case BAD_TOO_SHORT:
      send_packet (fd, msg, 10);
      break;
    case BAD_OVERSIZED:
      {
        gchar *big = g_malloc0 (DBUS_SEQPACKET_FRAGMENT_SIZE + 100);

        memcpy (big, msg, len);
        send_packet (fd, big, DBUS_SEQPACKET_FRAGMENT_SIZE + 100);
        g_free (big);
      }
      break;
    case BAD_SHORT_FRAGMENT:
      {
        /* A 200 KiB message: a correct first fragment, then a second
         * one that is neither DBUS_SEQPACKET_FRAGMENT_SIZE long nor the rest */
        DBusMessage *m = dbus_message_new_method_call (DBUS_SERVICE_DBUS,
                                                       DBUS_PATH_DBUS,
                                                       DBUS_INTERFACE_PEER,
                                                       "Ping");
        guchar *payload = g_malloc0 (200 * 1024);
        char *bytes = NULL;
        int blen = 0;

        g_assert_true (dbus_message_append_args (m, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE,
                                                 &payload, 200 * 1024,
                                                 DBUS_TYPE_INVALID));
        dbus_message_set_serial (m, 3);
        g_assert_true (dbus_message_marshal (m, &bytes, &blen));
        send_packet (fd, bytes, DBUS_SEQPACKET_FRAGMENT_SIZE);
        send_packet (fd, bytes + DBUS_SEQPACKET_FRAGMENT_SIZE, 1000);
        dbus_free (bytes);
        dbus_message_unref (m);
        g_free (payload);
      }
      break;
    default:
      g_assert_not_reached ();
    }
  g_free (msg);

  /* The daemon hangs up on the offender ... */
  raw_wait_closed (fd);
  close (fd);

  /* ... and tells the bus it left */
  lost = wait_for_message (observer, is_name_lost_by, unique_copy);
  dbus_message_unref (lost);
  g_free (unique_copy);

  /* The daemon says why, naming the offender */
  {
    const gchar *why[] = { "truncated message", "invalid message header",
                           "packet holds more than one message",
                           "packet too short for a message header",
                           "packet longer than the fragment size",
                           "fragment of the wrong length" };
    gchar *expected = g_strdup_printf ("Disconnecting SOCK_SEQPACKET peer (pid %lu): %s",
                                       (unsigned long) getpid (), why[kind]);
    gchar *log = NULL;

    g_assert_true (g_file_get_contents (f->daemon_log, &log, NULL, NULL));
    g_assert_nonnull (strstr (log, expected));
    g_free (log);
    g_free (expected);
  }

  /* Everybody else is unaffected */
  g_assert_true (daemon_alive (f));
  method_roundtrip (observer, seq, "still here");
  id = dbus_bus_get_id (seq, &error);
  test_assert_no_error (&error);
  dbus_free (id);

  disconnect_bus (observer);
  disconnect_bus (seq);
}

static int
count_unique_names (DBusConnection *c)
{
  DBusMessage *call = dbus_message_new_method_call (DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                                                    DBUS_INTERFACE_DBUS, "ListNames");
  DBusError error = DBUS_ERROR_INIT;
  DBusMessage *reply;
  char **names = NULL;
  int n_names = 0;
  int i, count = 0;

  reply = dbus_connection_send_with_reply_and_block (c, call, 10000, &error);
  test_assert_no_error (&error);
  g_assert_true (dbus_message_get_args (reply, &error, DBUS_TYPE_ARRAY, DBUS_TYPE_STRING,
                                        &names, &n_names, DBUS_TYPE_INVALID));
  for (i = 0; i < n_names; i++)
    if (names[i][0] == ':')
      count++;
  dbus_free_string_array (names);
  dbus_message_unref (reply);
  dbus_message_unref (call);
  return count;
}

static void
wait_for_unique_names (DBusConnection *observer, int expected)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;

  while (count_unique_names (observer) != expected)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_usleep (20000);
    }
}

static void
test_many_clients (Fixture *f, gconstpointer data)
{
  enum { N = 100, ROUNDS = 3 };
  DBusConnection *observer = connect_bus (f->stream_address);
  DBusConnection *clients[N];
  int round, i;

  for (round = 0; round < ROUNDS; round++)
    {
      for (i = 0; i < N; i++)
        clients[i] = connect_bus (i % 2 ? f->seq_address : f->stream_address);
      wait_for_unique_names (observer, N + 1);

      /* Neighbours of the two kinds can talk */
      method_roundtrip (clients[round], clients[round + 1], "neighbour");

      /* Half leave politely, the other half just vanish (close without
       * anything else); the daemon must notice both */
      for (i = 0; i < N; i += 2)
        disconnect_bus (clients[i]);
      wait_for_unique_names (observer, N / 2 + 1);
      for (i = 1; i < N; i += 2)
        {
          int fd = -1;

          g_assert_true (dbus_connection_get_socket (clients[i], &fd));
          shutdown (fd, SHUT_RDWR);
          disconnect_bus (clients[i]);
        }
      wait_for_unique_names (observer, 1);
    }

  disconnect_bus (observer);
}

/* ---- tools and unmodified clients -------------------------------------- */

static gchar *
run_tool (const gchar * const *argv, int *status)
{
  GError *error = NULL;
  gchar *out = NULL;
  gchar *err = NULL;

  g_spawn_sync (NULL, (gchar **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                &out, &err, status, &error);
  g_assert_no_error (error);
  if (*status != 0)
    g_test_message ("%s failed: %s%s", argv[0], out, err);
  g_free (err);
  return out;
}

static void
test_tools (Fixture *f, gconstpointer data)
{
  gchar *send_tool = stage_file ("bin/dbus-send");
  gchar *monitor_tool = stage_file ("bin/dbus-monitor");
  gchar *run_session = stage_file ("bin/dbus-run-session");
  gchar *daemon = stage_file ("bin/dbus-daemon");
  const gchar *addresses[] = { f->seq_address, f->stream_address, f->full_address };
  gsize i;
  int status;
  gchar *out;

  /* dbus-send over each address */
  for (i = 0; i < G_N_ELEMENTS (addresses); i++)
    {
      gchar *bus = g_strdup_printf ("--bus=%s", addresses[i]);
      const gchar *argv[] = { send_tool, bus, "--print-reply",
                              "--dest=" DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                              DBUS_INTERFACE_DBUS ".GetId", NULL };

      out = run_tool (argv, &status);
      g_assert_cmpint (status, ==, 0);
      g_assert_nonnull (strstr (out, "string \""));
      g_free (out);
      g_free (bus);
    }

  /* dbus-monitor on the SEQPACKET address sees a signal dbus-send emits
   * over the stream address, and the reverse */
  for (i = 0; i < 2; i++)
    {
      gchar *mon_addr = g_strdup (i == 0 ? f->seq_address : f->stream_address);
      gchar *send_addr = g_strdup_printf ("--bus=%s", i == 0 ? f->stream_address : f->seq_address);
      const gchar *margv[] = { monitor_tool, "--address", mon_addr,
                               "type='signal',interface='" TEST_IFACE "'", NULL };
      const gchar *sargv[] = { send_tool, send_addr, TEST_PATH,
                               TEST_IFACE ".ToolPing", "string:hello-monitor",
                               NULL };
      GPid pid;
      gint mon_out;
      GError *error = NULL;
      GString *seen = g_string_new (NULL);
      gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;

      g_spawn_async_with_pipes (NULL, (gchar **) margv, NULL,
                                G_SPAWN_DO_NOT_REAP_CHILD,
                                die_with_parent, NULL, &pid, NULL, &mon_out,
                                NULL, &error);
      g_assert_no_error (error);

      /* The monitor needs a moment to become one: emit until it reports */
      while (strstr (seen->str, "hello-monitor") == NULL)
        {
          struct pollfd p = { mon_out, POLLIN, 0 };
          gchar buf[4096];

          g_assert_cmpint (g_get_monotonic_time (), <, deadline);
          out = run_tool (sargv, &status);
          g_assert_cmpint (status, ==, 0);
          g_free (out);
          while (poll (&p, 1, 200) == 1)
            {
              gssize n = read (mon_out, buf, sizeof (buf));

              if (n <= 0)
                break;
              g_string_append_len (seen, buf, n);
            }
        }
      g_assert_nonnull (strstr (seen->str, "member=ToolPing"));
      kill (pid, SIGTERM);
      waitpid (pid, NULL, 0);
      g_spawn_close_pid (pid);
      close (mon_out);
      g_string_free (seen, TRUE);
      g_free (mon_addr);
      g_free (send_addr);
    }

  /* dbus-run-session with a config listening on both: the session address
   * lists the SEQPACKET entry first and the staged dbus-send uses it */
  {
    gchar *cfg = g_strdup_printf ("--config-file=%s", f->config);
    gchar *dd = g_strdup_printf ("--dbus-daemon=%s", daemon);
    gchar *script = g_strdup_printf (
        "printf '%%s\\n' \"$DBUS_SESSION_BUS_ADDRESS\"; "
        "'%s' --session --print-reply --dest=" DBUS_SERVICE_DBUS " "
        DBUS_PATH_DBUS " " DBUS_INTERFACE_DBUS ".GetId", send_tool);
    const gchar *argv[] = { run_session, cfg, dd, "--", "/bin/sh", "-c",
                            script, NULL };

    out = run_tool (argv, &status);
    g_assert_cmpint (status, ==, 0);
    g_assert_true (g_str_has_prefix (out, "unixseq:path="));
    g_assert_nonnull (strstr (out, ";unix:path="));
    g_assert_nonnull (strstr (out, "string \""));
    g_free (out);
    g_free (cfg);
    g_free (dd);
    g_free (script);
  }

  g_free (send_tool);
  g_free (monitor_tool);
  g_free (run_session);
  g_free (daemon);
}

/* Unmodified clients (Debian's libdbus, GDBus, sd-bus) given the whole
 * address skip the unixseq: entry and use the stream one */
static void
test_unmodified_clients (Fixture *f, gconstpointer data)
{
  const gchar *kind = data;
  const gchar *argv[16] = { NULL };
  gchar *addr_arg = NULL;
  gchar *program;
  int status;
  gchar *out;

  if (strcmp (kind, "libdbus") == 0)
    {
      program = g_strdup ("/usr/bin/dbus-send");
      addr_arg = g_strdup_printf ("--bus=%s", f->full_address);
      argv[0] = program; argv[1] = addr_arg; argv[2] = "--print-reply";
      argv[3] = "--dest=" DBUS_SERVICE_DBUS; argv[4] = DBUS_PATH_DBUS;
      argv[5] = DBUS_INTERFACE_DBUS ".GetId";
    }
  else if (strcmp (kind, "gdbus") == 0)
    {
      program = g_strdup ("/usr/bin/gdbus");
      argv[0] = program; argv[1] = "call"; argv[2] = "--address";
      argv[3] = f->full_address; argv[4] = "--dest"; argv[5] = DBUS_SERVICE_DBUS;
      argv[6] = "--object-path"; argv[7] = DBUS_PATH_DBUS; argv[8] = "--method";
      argv[9] = DBUS_INTERFACE_DBUS ".GetId";
    }
  else
    {
      program = g_strdup ("/usr/bin/busctl");
      addr_arg = g_strdup_printf ("--address=%s", f->full_address);
      argv[0] = program; argv[1] = addr_arg; argv[2] = "call";
      argv[3] = DBUS_SERVICE_DBUS; argv[4] = DBUS_PATH_DBUS;
      argv[5] = DBUS_INTERFACE_DBUS; argv[6] = "GetId";
    }

  if (!g_file_test (program, G_FILE_TEST_IS_EXECUTABLE))
    {
      g_test_skip ("not installed");
      g_free (program);
      g_free (addr_arg);
      return;
    }

  out = run_tool (argv, &status);
  g_assert_cmpint (status, ==, 0);
  g_assert_true (strlen (out) > 32);
  g_free (out);
  g_free (program);
  g_free (addr_arg);
}

/* Peer-to-peer: a plain DBusServer on unixseq: and a client thread */
typedef struct
{
  DBusWatch *watch;
  DBusConnection *accepted;
} P2PServer;

static dbus_bool_t
p2p_add_watch (DBusWatch *watch, void *data)
{
  P2PServer *s = data;

  if (dbus_watch_get_flags (watch) & DBUS_WATCH_READABLE)
    s->watch = watch;
  return TRUE;
}

static void
p2p_remove_watch (DBusWatch *watch, void *data)
{
  P2PServer *s = data;

  if (s->watch == watch)
    s->watch = NULL;
}

static void
p2p_new_connection (DBusServer *server, DBusConnection *c, void *data)
{
  P2PServer *s = data;

  g_assert_null (s->accepted);
  s->accepted = dbus_connection_ref (c);
}

static gpointer
p2p_client (gpointer address)
{
  DBusError error = DBUS_ERROR_INIT;
  DBusConnection *c = dbus_connection_open_private (address, &error);
  DBusMessage *call;
  DBusMessage *reply;
  const char *text = "peer to peer";
  const char *answer = NULL;
  int pipe_fds[2];

  test_assert_no_error (&error);
  dbus_connection_set_exit_on_disconnect (c, FALSE);
  g_assert_cmpint (socket_type (c), ==, SOCK_SEQPACKET);

  /* fd passing is negotiated in SASL: authenticate first (as for unix:) */
  while (!dbus_connection_get_is_authenticated (c))
    g_assert_true (dbus_connection_read_write (c, 100));
  g_assert_true (dbus_connection_can_send_type (c, DBUS_TYPE_UNIX_FD));

  g_assert_cmpint (pipe (pipe_fds), ==, 0);
  call = dbus_message_new_method_call (NULL, TEST_PATH, TEST_IFACE, "Echo");
  g_assert_true (dbus_message_append_args (call, DBUS_TYPE_STRING, &text,
                                           DBUS_TYPE_UNIX_FD, &pipe_fds[1],
                                           DBUS_TYPE_INVALID));
  close (pipe_fds[1]);
  reply = dbus_connection_send_with_reply_and_block (c, call, 30000, &error);
  test_assert_no_error (&error);
  g_assert_true (dbus_message_get_args (reply, NULL, DBUS_TYPE_STRING, &answer,
                                        DBUS_TYPE_INVALID));
  g_assert_cmpstr (answer, ==, text);
  {
    char buf[8] = { 0 };

    /* the server wrote into the pipe through the fd we passed */
    g_assert_cmpint (read (pipe_fds[0], buf, sizeof (buf)), ==, 3);
    g_assert_cmpstr (buf, ==, "p2p");
  }
  close (pipe_fds[0]);
  dbus_message_unref (reply);
  dbus_message_unref (call);
  dbus_connection_close (c);
  dbus_connection_unref (c);
  return NULL;
}

static void
test_peer_to_peer (Fixture *f, gconstpointer data)
{
  DBusError error = DBUS_ERROR_INIT;
  gchar *listen = g_strdup_printf ("unixseq:dir=%s", f->tmpdir);
  P2PServer s = { NULL, NULL };
  DBusServer *server;
  char *address;
  GThread *client;
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;
  DBusMessage *call;
  DBusMessage *reply;
  const char *text = NULL;
  int fd = -1;

  dbus_threads_init_default ();
  server = dbus_server_listen (listen, &error);
  test_assert_no_error (&error);
  address = dbus_server_get_address (server);
  g_assert_true (g_str_has_prefix (address, "unixseq:path="));
  g_assert_nonnull (strstr (address, ",guid="));
  g_assert_true (dbus_server_set_watch_functions (server, p2p_add_watch,
                                                  p2p_remove_watch, NULL,
                                                  &s, NULL));
  dbus_server_set_new_connection_function (server, p2p_new_connection, &s, NULL);

  client = g_thread_new ("p2p-client", p2p_client, address);

  while (s.accepted == NULL)
    {
      struct pollfd p = { -1, POLLIN, 0 };

      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_assert_nonnull (s.watch);
      p.fd = dbus_watch_get_unix_fd (s.watch);
      if (poll (&p, 1, 100) == 1)
        dbus_watch_handle (s.watch, DBUS_WATCH_READABLE);
    }

  dbus_connection_set_exit_on_disconnect (s.accepted, FALSE);
  call = wait_for_message (s.accepted, is_method_call, "Echo");
  g_assert_true (dbus_message_get_args (call, NULL, DBUS_TYPE_STRING, &text,
                                        DBUS_TYPE_UNIX_FD, &fd,
                                        DBUS_TYPE_INVALID));
  g_assert_cmpint (write (fd, "p2p", 3), ==, 3);
  close (fd);
  reply = dbus_message_new_method_return (call);
  g_assert_true (dbus_message_append_args (reply, DBUS_TYPE_STRING, &text,
                                           DBUS_TYPE_INVALID));
  send_flush (s.accepted, reply);
  dbus_message_unref (reply);
  dbus_message_unref (call);

  g_thread_join (client);

  dbus_connection_close (s.accepted);
  dbus_connection_unref (s.accepted);
  dbus_server_disconnect (server);
  dbus_server_unref (server);
  dbus_free (address);
  g_free (listen);
}

/* Whether this kernel has multicast AF_UNIX groups: a unixseq: server
 * says whether its listening socket is one */
static gboolean
kernel_has_groups (Fixture *f)
{
  DBusError error = DBUS_ERROR_INIT;
  gchar *listen = g_strdup_printf ("unixseq:dir=%s", f->tmpdir);
  DBusServer *server = dbus_server_listen (listen, &error);
  gboolean groups;

  test_assert_no_error (&error);
  groups = _dbus_server_socket_set_mcast_offered (server, FALSE);
  dbus_server_disconnect (server);
  dbus_server_unref (server);
  g_free (listen);
  return groups;
}

/* dbus-daemon (which does not offer multicast yet) answers
 * NEGOTIATE_MULTICAST with ERROR, and the connection goes on classic. */
static void
test_mcast_daemon_refuses (Fixture *f, gconstpointer data)
{
  gchar *answer = NULL;
  int fd = raw_connect_to (f->seq_path, TRUE, &answer);
  int len;
  gchar *hello = marshal_call ("Hello", 1, &len);
  DBusMessage *reply;

  g_assert_cmpstr (answer, ==, "ERROR");
  send_packet (fd, hello, len);
  reply = raw_wait_reply (fd, 1);
  g_assert_cmpint (dbus_message_get_type (reply), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  dbus_message_unref (reply);
  g_free (hello);
  g_free (answer);
  close (fd);
}

/* A peer-to-peer DBusServer on unixseq: agrees to multicast only when its
 * owner offers it and its socket is a kernel group; the accepted
 * connection says what was negotiated. */
static void
test_mcast_server_offer (Fixture *f, gconstpointer data)
{
  gboolean offer = GPOINTER_TO_INT (data);
  DBusError error = DBUS_ERROR_INIT;
  gchar *listen = g_strdup_printf ("unixseq:dir=%s", f->tmpdir);
  P2PServer s = { NULL, NULL };
  DBusServer *server;
  DBusAddressEntry **parsed;
  int n_parsed;
  char *address;
  gchar *answer = NULL;
  gboolean groups;
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;
  int fd;

  server = dbus_server_listen (listen, &error);
  test_assert_no_error (&error);
  groups = _dbus_server_socket_set_mcast_offered (server, offer);
  g_test_message ("kernel groups: %s", groups ? "yes" : "no");
  address = dbus_server_get_address (server);
  g_assert_true (dbus_parse_address (address, &parsed, &n_parsed, &error));
  g_assert_true (dbus_server_set_watch_functions (server, p2p_add_watch,
                                                  p2p_remove_watch, NULL,
                                                  &s, NULL));
  dbus_server_set_new_connection_function (server, p2p_new_connection, &s, NULL);

  /* A client that asks, with the server running in this thread: accept
   * and authenticate in steps */
  {
    struct sockaddr_un addr = { AF_UNIX, { 0 } };
    gchar *uid = g_strdup_printf ("%u", (unsigned) getuid ());
    GString *auth = g_string_new ("AUTH EXTERNAL ");
    const gchar *p;
    gchar buf[512];
    int step;

    fd = socket (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    g_strlcpy (addr.sun_path, dbus_address_entry_get_value (parsed[0], "path"),
               sizeof (addr.sun_path));
    g_assert_cmpint (connect (fd, (struct sockaddr *) &addr, sizeof (addr)), ==, 0);
    for (p = uid; *p != '\0'; p++)
      g_string_append_printf (auth, "%02x", (guchar) *p);
    g_string_append (auth, "\r\n");
    send_packet (fd, "", 1);
    send_packet (fd, auth->str, auth->len);

    /* serve until the answer to NEGOTIATE_MULTICAST is there */
    for (step = 0; step < 2; )
      {
        struct pollfd pf[2] = { { fd, POLLIN, 0 }, { -1, POLLIN, 0 } };
        gssize n;

        g_assert_cmpint (g_get_monotonic_time (), <, deadline);
        if (s.watch != NULL)
          pf[1].fd = dbus_watch_get_unix_fd (s.watch);
        poll (pf, 2, 10);
        if (pf[1].revents & POLLIN)
          dbus_watch_handle (s.watch, DBUS_WATCH_READABLE);
        if (s.accepted != NULL)
          dbus_connection_read_write (s.accepted, 0);
        if (!(pf[0].revents & POLLIN))
          continue;
        n = recv (fd, buf, sizeof (buf) - 1, 0);
        g_assert_cmpint (n, >, 0);
        buf[n] = '\0';
        if (step == 0)
          {
            g_assert_true (g_str_has_prefix (buf, "OK "));
            send_packet (fd, "NEGOTIATE_MULTICAST\r\n", 21);
          }
        else
          answer = g_strndup (buf, strcspn (buf, " \r\n"));
        step++;
      }
    send_packet (fd, "BEGIN\r\n", 7);
    while (!dbus_connection_get_is_authenticated (s.accepted))
      {
        g_assert_cmpint (g_get_monotonic_time (), <, deadline);
        dbus_connection_read_write (s.accepted, 10);
      }
    g_string_free (auth, TRUE);
    g_free (uid);
  }

  g_assert_cmpstr (answer, ==, offer && groups ? "AGREE_MULTICAST" : "ERROR");
  g_assert_cmpint (_dbus_connection_get_mcast_negotiated (s.accepted), ==,
                   offer && groups);

  close (fd);
  dbus_connection_close (s.accepted);
  dbus_connection_unref (s.accepted);
  dbus_server_disconnect (server);
  dbus_server_unref (server);
  dbus_address_entries_free (parsed);
  dbus_free (address);
  g_free (answer);
  g_free (listen);
}

/* Reads one SASL packet from a libdbus client, which runs in this
 * thread: pump it while waiting */
static gchar *
client_line (DBusConnection *c, int fd)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;
  gchar buf[512];
  gssize n;

  while ((n = recv (fd, buf, sizeof (buf) - 1, MSG_DONTWAIT)) < 0 && errno == EAGAIN)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      dbus_connection_read_write (c, 0);
      g_usleep (1000);
    }
  g_assert_cmpint (n, >, 0);
  buf[n] = '\0';
  return g_strdup (buf);
}

/* Our libdbus asks for multicast only where the kernel could make it a
 * member; a server's ERROR (what a stock server answers) leaves it
 * classic: it sends BEGIN and works, without SENDER. */
static void
test_mcast_client (Fixture *f, gconstpointer data)
{
  gchar *path = g_build_filename (f->tmpdir, "hand-made", NULL);
  gchar *address = g_strdup_printf ("unixseq:path=%s", path);
  struct sockaddr_un addr = { AF_UNIX, { 0 } };
  int listen_fd = socket (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  gboolean groups = kernel_has_groups (f);
  DBusError error = DBUS_ERROR_INIT;
  DBusConnection *c;
  DBusMessage *hello, *m;
  dbus_uint32_t serial;
  const char *name = ":1.1";
  gchar *line;
  int fd, len;
  char *bytes;

  g_strlcpy (addr.sun_path, path, sizeof (addr.sun_path));
  g_assert_cmpint (bind (listen_fd, (struct sockaddr *) &addr, sizeof (addr)), ==, 0);
  g_assert_cmpint (listen (listen_fd, 1), ==, 0);
  c = dbus_connection_open_private (address, &error);
  test_assert_no_error (&error);
  dbus_connection_set_exit_on_disconnect (c, FALSE);
  fd = accept (listen_fd, NULL, NULL);
  g_assert_cmpint (fd, >=, 0);

  line = client_line (c, fd);
  g_assert_cmpint (line[0], ==, '\0'); /* the credentials byte */
  g_free (line);
  line = client_line (c, fd);
  g_assert_true (g_str_has_prefix (line, "AUTH EXTERNAL "));
  g_free (line);
  send_packet (fd, "OK 0123456789abcdef0123456789abcdef\r\n", 37);
  line = client_line (c, fd);
  g_assert_cmpstr (line, ==, "NEGOTIATE_UNIX_FD\r\n");
  g_free (line);
  send_packet (fd, "AGREE_UNIX_FD\r\n", 15);
  line = client_line (c, fd);
  if (groups)
    {
      g_assert_cmpstr (line, ==, "NEGOTIATE_MULTICAST\r\n");
      g_free (line);
      send_packet (fd, "ERROR\r\n", 7);
      line = client_line (c, fd);
    }
  g_assert_cmpstr (line, ==, "BEGIN\r\n");
  g_free (line);

  hello = dbus_message_new_method_call (DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                                        DBUS_INTERFACE_DBUS, "Hello");
  g_assert_true (dbus_connection_send (c, hello, &serial));
  dbus_message_unref (hello);
  dbus_connection_flush (c);
  {
    gchar *packet = g_malloc (DBUS_SEQPACKET_FRAGMENT_SIZE);
    gssize n = recv_packet (fd, packet, DBUS_SEQPACKET_FRAGMENT_SIZE, 10000);

    /* one message per packet, and no SENDER: not a member */
    g_assert_cmpint (dbus_message_demarshal_bytes_needed (packet, n), ==, n);
    m = dbus_message_demarshal (packet, n, &error);
    test_assert_no_error (&error);
    g_assert_true (dbus_message_is_method_call (m, DBUS_INTERFACE_DBUS, "Hello"));
    g_assert_null (dbus_message_get_sender (m));
    dbus_message_unref (m);
    g_free (packet);
  }

  m = dbus_message_new (DBUS_MESSAGE_TYPE_METHOD_RETURN);
  dbus_message_set_reply_serial (m, serial);
  dbus_message_set_sender (m, DBUS_SERVICE_DBUS);
  dbus_message_set_destination (m, name);
  dbus_message_append_args (m, DBUS_TYPE_STRING, &name, DBUS_TYPE_INVALID);
  dbus_message_set_serial (m, 1);
  g_assert_true (dbus_message_marshal (m, &bytes, &len));
  send_packet (fd, bytes, len);
  dbus_free (bytes);
  dbus_message_unref (m);
  while ((m = dbus_connection_pop_message (c)) == NULL)
    g_assert_true (dbus_connection_read_write (c, 100));
  g_assert_cmpuint (dbus_message_get_reply_serial (m), ==, serial);
  dbus_message_unref (m);

  dbus_connection_close (c);
  dbus_connection_unref (c);
  close (fd);
  close (listen_fd);
  g_unlink (path);
  g_free (path);
  g_free (address);
}

/* dbus-daemon --address with the other unixseq: forms; bad addresses */
static void
test_addresses (Fixture *f, gconstpointer data)
{
  gchar *daemon = stage_file ("bin/dbus-daemon");
  gchar *abstract = g_strdup_printf ("dbus-mcast-test-%d", (int) getpid ());
  gchar *explicit_path = g_build_filename (f->tmpdir, "explicit-seq", NULL);
  gchar *forms[2];
  const gchar *bad[] = { "unixseq:", "unixseq:path=/a,abstract=b",
                         "unixseq:runtime=yes" };
  DBusError error = DBUS_ERROR_INIT;
  gsize i;

  forms[0] = g_strdup_printf ("unixseq:abstract=%s", abstract);
  forms[1] = g_strdup_printf ("unixseq:path=%s", explicit_path);

  for (i = 0; i < G_N_ELEMENTS (forms); i++)
    {
      gchar *cfg = g_strdup_printf ("--config-file=%s", f->config);
      gchar *addr = g_strdup_printf ("--address=%s", forms[i]);
      const gchar *argv[] = { daemon, cfg, addr, "--print-address=1",
                              "--nofork", NULL };
      GError *gerror = NULL;
      GPid pid;
      gint out_fd;
      gchar buf[512];
      gssize n = 0;
      DBusConnection *c;

      g_spawn_async_with_pipes (NULL, (gchar **) argv, NULL,
                                G_SPAWN_DO_NOT_REAP_CHILD,
                                die_with_parent, NULL, &pid, NULL, &out_fd,
                                NULL, &gerror);
      g_assert_no_error (gerror);
      while (n < (gssize) sizeof (buf) - 1 && (n == 0 || buf[n - 1] != '\n'))
        {
          gssize r = read (out_fd, buf + n, sizeof (buf) - 1 - n);

          g_assert_cmpint (r, >, 0);
          n += r;
        }
      buf[n - 1] = '\0';
      close (out_fd);
      /* --address replaces the <listen> elements: only this one */
      g_assert_true (g_str_has_prefix (buf, forms[i]));
      g_assert_null (strchr (buf, ';'));

      c = connect_bus (buf);
      g_assert_cmpint (socket_type (c), ==, SOCK_SEQPACKET);
      disconnect_bus (c);

      kill (pid, SIGTERM);
      waitpid (pid, NULL, 0);
      g_spawn_close_pid (pid);
      g_free (cfg);
      g_free (addr);
    }
  /* The socket file is removed when the daemon exits */
  g_assert_false (g_file_test (explicit_path, G_FILE_TEST_EXISTS));

  for (i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      DBusServer *server = dbus_server_listen (bad[i], &error);
      DBusConnection *c;

      g_assert_null (server);
      g_assert_cmpstr (error.name, ==, DBUS_ERROR_BAD_ADDRESS);
      dbus_error_free (&error);

      c = dbus_connection_open_private (bad[i], &error);
      g_assert_null (c);
      g_assert_cmpstr (error.name, ==, DBUS_ERROR_BAD_ADDRESS);
      dbus_error_free (&error);
    }

  /* Nobody listening: a clear connection error, not a hang */
  {
    gchar *nowhere = g_strdup_printf ("unixseq:path=%s/nowhere", f->tmpdir);
    DBusConnection *c = dbus_connection_open_private (nowhere, &error);

    g_assert_null (c);
    g_assert_cmpstr (error.name, ==, DBUS_ERROR_FILE_NOT_FOUND);
    dbus_error_free (&error);
    g_free (nowhere);
  }

  g_free (forms[0]);
  g_free (forms[1]);
  g_free (abstract);
  g_free (explicit_path);
  g_free (daemon);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  signal (SIGPIPE, SIG_IGN);

#define ADD(path, func, data) \
  g_test_add (path, Fixture, data, setup, func, teardown)

  ADD ("/seqpacket/hello", test_hello, NULL);
  ADD ("/seqpacket/method-call", test_method_call, NULL);
  ADD ("/seqpacket/signals", test_signals, NULL);
  ADD ("/seqpacket/write-blocked", test_write_blocked, NULL);
  ADD ("/seqpacket/fd-passing", test_fd_passing, NULL);
  ADD ("/seqpacket/large/fragment-boundaries", test_fragment_boundaries, NULL);
  ADD ("/seqpacket/large/64mib", test_large_64mib, NULL);
  ADD ("/seqpacket/large/small-sndbuf", test_small_sndbuf, NULL);
  ADD ("/seqpacket/malformed/truncated", test_malformed, GINT_TO_POINTER (BAD_TRUNCATED));
  ADD ("/seqpacket/malformed/garbage", test_malformed, GINT_TO_POINTER (BAD_GARBAGE));
  ADD ("/seqpacket/malformed/two-in-one-packet", test_malformed, GINT_TO_POINTER (BAD_TWO_IN_ONE));
  ADD ("/seqpacket/malformed/too-short", test_malformed, GINT_TO_POINTER (BAD_TOO_SHORT));
  ADD ("/seqpacket/malformed/oversized", test_malformed, GINT_TO_POINTER (BAD_OVERSIZED));
  ADD ("/seqpacket/malformed/short-fragment", test_malformed, GINT_TO_POINTER (BAD_SHORT_FRAGMENT));
  ADD ("/seqpacket/many-clients", test_many_clients, NULL);
  ADD ("/seqpacket/addresses", test_addresses, NULL);
  ADD ("/seqpacket/peer-to-peer", test_peer_to_peer, NULL);
  ADD ("/seqpacket/multicast/daemon-refuses", test_mcast_daemon_refuses, NULL);
  ADD ("/seqpacket/multicast/server-not-offering", test_mcast_server_offer, GINT_TO_POINTER (FALSE));
  ADD ("/seqpacket/multicast/server-offering", test_mcast_server_offer, GINT_TO_POINTER (TRUE));
  ADD ("/seqpacket/multicast/client", test_mcast_client, NULL);
  ADD ("/seqpacket/tools", test_tools, NULL);
  ADD ("/seqpacket/unmodified/libdbus", test_unmodified_clients, "libdbus");
  ADD ("/seqpacket/unmodified/gdbus", test_unmodified_clients, "gdbus");
  ADD ("/seqpacket/unmodified/sd-bus", test_unmodified_clients, "sd-bus");

  return g_test_run ();
}
