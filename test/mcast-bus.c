/* test/mcast-bus.c  The multicast bus as its clients see it: promotion,
 * routing between members and classic clients, the semantics of a stock
 * bus, and what a misbehaving member cannot do.
 *
 * Runs against the buses test/bus/run starts (in the VM with the
 * patched kernel, and on the host with a stock kernel, where the same
 * tests exercise the classic path):
 *
 *   DBUS_SESSION_BUS_ADDRESS               the test bus: "unixseq:...;unix:..."
 *   DBUS_MCAST_TEST_RESTRICTED_ADDRESS     a bus whose policy has a deny rule
 *   DBUS_MCAST_TEST_LIMITED_ADDRESS        a bus with a small max_outgoing_bytes
 *   DBUS_MCAST_TEST_REPLIES_ADDRESS        a bus with a small max_replies_per_connection
 *   DBUS_MCAST_TEST_ACTIVATABLE            a name its servicedir can activate
 *   DBUS_MCAST_STAGE                       the staged dbus (for dbus-monitor)
 *
 * Three kinds of client take part:
 *
 *   member   this fork's libdbus on the unixseq: address: promoted into
 *            the kernel group when the kernel and the bus allow it;
 *   classic  this fork's libdbus on the unix: address (stock protocol);
 *   gdbus    GDBus on the unix: address.
 *
 * Every test is single-threaded: a client sends without blocking and the
 * test then reads, as the receiving client, what arrived, so both ends of
 * an exchange are observed by one thread.  GDBus delivers what its worker
 * thread receives through a filter into a queue, converted to a
 * DBusMessage, so every assertion works on one message type.  Tests about
 * multicast internals (promotion, the daemon's counters) skip on a kernel
 * without the multicast AF_UNIX feature; everything else must hold on
 * either path.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>

#include <dbus/dbus.h>
#include <dbus/dbus-mcast-calls.h>
#include <dbus/dbus-mcast-member.h>
#include <dbus/dbus-message-internal.h>
#include <dbus/dbus-seqpacket-io.h>
#include <gio/gio.h>
#include <glib.h>
#include <glib-unix.h>

#include "test-utils-glib.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
/* After <sys/un.h>: the multicast UAPI of the patched kernel's headers */
#include <linux/filter.h>
#include <linux/un.h>

#ifndef UNIX_PEER_FILTER
#error "compile with the patched kernel's UAPI headers (-isystem build/kernel-headers/include)"
#endif

/* Generous even under TCG; short enough that a suite with many lost
 * messages still ends within vm-run's timeout */
#define TIMEOUT_US (20 * G_USEC_PER_SEC)
#define TEST_IFACE "org.dbusmcast.BusTest"
#define OTHER_IFACE "org.dbusmcast.BusTest.Other"
#define TEST_PATH "/org/dbusmcast/BusTest"
#define TEST_ERROR "org.dbusmcast.BusTest.Error.Failed"
/* Must match the max_message_size test/bus/run gives the small bus */
#define SMALL_MESSAGE_LIMIT 16384
/* Must match the reply_timeout test/bus/run gives the timed bus */
#define REPLY_TIMEOUT_MS 2000
/* Must match the <deny> rule run-bus-vm writes into the restricted bus */
#define DENIED_IFACE "org.dbusmcast.BusTest.Denied"

static const gchar *bus_address;
static const gchar *restricted_address;
static const gchar *limited_address;
static const gchar *small_address;
static const gchar *timed_address;
/* a bus with a max_replies_per_connection of REPLIES_LIMIT */
static const gchar *replies_address;
/* a session bus whose configuration file the tests may edit and reload */
static const gchar *reloading_address;
static const gchar *reloading_config;
static const gchar *activatable_name;
static const gchar *slow_activatable_name;

/* The entries of a bus address list with the given transport */
static gchar *
address_entry (const gchar *address,
               const gchar *prefix)
{
  gchar **entries = g_strsplit (address, ";", -1);
  gchar *found = NULL;
  guint i;

  for (i = 0; entries[i] != NULL && found == NULL; i++)
    if (g_str_has_prefix (entries[i], prefix))
      found = g_strdup (entries[i]);
  g_strfreev (entries);
  if (found == NULL)
    g_error ("no %s entry in the bus address %s", prefix, address);
  return found;
}

/* ---- the three kinds of client ----------------------------------------- */

typedef enum
{
  PEER_MEMBER,
  PEER_CLASSIC,
  PEER_GDBUS
} PeerKind;

typedef struct
{
  PeerKind kind;
  DBusConnection *dc;           /* member, classic */
  GDBusConnection *gc;          /* gdbus */
  guint filter_id;
  GAsyncQueue *queue;           /* gdbus: DBusMessage * from the filter */
  GQueue stash;                 /* received, passed over by peer_wait() */
  gchar *name;                  /* unique name */
} Peer;

static PeerKind
peer_kind_from_string (const gchar *s)
{
  if (strcmp (s, "member") == 0)
    return PEER_MEMBER;
  if (strcmp (s, "classic") == 0)
    return PEER_CLASSIC;
  if (strcmp (s, "gdbus") == 0)
    return PEER_GDBUS;
  g_error ("unknown client kind %s", s);
}

/* m as a libdbus message, in m's byte order */
static DBusMessage *
libdbus_message_of (GDBusMessage *m)
{
  DBusError derror = DBUS_ERROR_INIT;
  GError *error = NULL;
  DBusMessage *copy;
  guchar *blob;
  gsize size;

  blob = g_dbus_message_to_blob (m, &size, G_DBUS_CAPABILITY_FLAGS_NONE, &error);
  g_assert_no_error (error);
  copy = dbus_message_demarshal ((const char *) blob, size, &derror);
  test_assert_no_error (&derror);
  g_free (blob);
  return copy;
}

/* m as a GDBus message, with serial (set on m too) */
static GDBusMessage *
gdbus_message_of (DBusMessage   *m,
                  dbus_uint32_t  serial)
{
  GError *error = NULL;
  GDBusMessage *copy;
  char *bytes = NULL;
  int len = 0;

  dbus_message_set_serial (m, serial);
  g_assert_true (dbus_message_marshal (m, &bytes, &len));
  copy = g_dbus_message_new_from_blob ((guchar *) bytes, len,
                                       G_DBUS_CAPABILITY_FLAGS_NONE, &error);
  g_assert_no_error (error);
  dbus_free (bytes);
  return copy;
}

/* GDBus's worker thread: queue a copy of every incoming message; keep
 * method calls from GDBus (it would answer them itself) */
static GDBusMessage *
gdbus_filter (GDBusConnection *connection,
              GDBusMessage    *message,
              gboolean         incoming,
              gpointer         user_data)
{
  Peer *p = user_data;

  if (!incoming)
    return message;
  g_async_queue_push (p->queue, libdbus_message_of (message));
  if (g_dbus_message_get_message_type (message) == G_DBUS_MESSAGE_TYPE_METHOD_CALL)
    {
      g_object_unref (message);
      return NULL;
    }
  return message;
}

static DBusConnection *
libdbus_connect (const gchar *address)
{
  DBusError error = DBUS_ERROR_INIT;
  DBusConnection *c;

  c = dbus_connection_open_private (address, &error);
  test_assert_no_error (&error);
  dbus_connection_set_exit_on_disconnect (c, FALSE);
  dbus_connection_set_max_received_size (c, 1000000000);
  dbus_connection_set_max_message_size (c, 1000000000);
  g_assert_true (dbus_bus_register (c, &error));
  test_assert_no_error (&error);
  return c;
}

/* A client of the given kind on the bus at address (the unixseq: entry
 * for a member, the unix: entry for the others) */
static Peer *
peer_new_on (PeerKind     kind,
             const gchar *address)
{
  Peer *p = g_new0 (Peer, 1);
  gchar *entry = address_entry (address, kind == PEER_MEMBER ? "unixseq:" : "unix:");
  GError *error = NULL;

  p->kind = kind;
  if (kind == PEER_GDBUS)
    {
      p->queue = g_async_queue_new_full ((GDestroyNotify) dbus_message_unref);
      p->gc = g_dbus_connection_new_for_address_sync (entry,
          G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
          G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION, NULL, NULL, &error);
      g_assert_no_error (error);
      g_dbus_connection_set_exit_on_close (p->gc, FALSE);
      p->filter_id = g_dbus_connection_add_filter (p->gc, gdbus_filter, p, NULL);
      p->name = g_strdup (g_dbus_connection_get_unique_name (p->gc));
    }
  else
    {
      p->dc = libdbus_connect (entry);
      p->name = g_strdup (dbus_bus_get_unique_name (p->dc));
    }
  g_free (entry);
  return p;
}

static Peer *
peer_new (PeerKind kind)
{
  return peer_new_on (kind, bus_address);
}

static void
peer_free (Peer *p)
{
  if (p->gc != NULL)
    {
      g_dbus_connection_remove_filter (p->gc, p->filter_id);
      g_dbus_connection_close_sync (p->gc, NULL, NULL);
      g_object_unref (p->gc);
      g_async_queue_unref (p->queue);
    }
  else
    {
      dbus_connection_close (p->dc);
      dbus_connection_unref (p->dc);
    }
  g_queue_clear_full (&p->stash, (GDestroyNotify) dbus_message_unref);
  g_free (p->name);
  g_free (p);
}

static gboolean
peer_is_connected (Peer *p)
{
  if (p->gc != NULL)
    return !g_dbus_connection_is_closed (p->gc);
  return dbus_connection_get_is_connected (p->dc);
}

/* Writes everything libdbus still queues for c, within the timeout */
static void
libdbus_flush (DBusConnection *c)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;

  while (dbus_connection_has_messages_to_send (c))
    {
      g_assert_true (dbus_connection_read_write (c, 100));
      if (g_get_monotonic_time () > deadline)
        g_error ("could not send within %d s", (int) (TIMEOUT_US / G_USEC_PER_SEC));
    }
}

/* Sends m (its serial is assigned here) and writes it out; returns the
 * serial */
static dbus_uint32_t
peer_send (Peer        *p,
           DBusMessage *m)
{
  dbus_uint32_t serial = 0;

  if (p->gc != NULL)
    {
      GDBusMessage *gm = gdbus_message_of (m, 1);
      GError *error = NULL;

      g_dbus_connection_send_message (p->gc, gm, G_DBUS_SEND_MESSAGE_FLAGS_NONE,
                                      &serial, &error);
      g_assert_no_error (error);
      g_dbus_connection_flush_sync (p->gc, NULL, &error);
      g_assert_no_error (error);
      g_object_unref (gm);
    }
  else
    {
      g_assert_true (dbus_connection_send (p->dc, m, &serial));
      libdbus_flush (p->dc);
    }
  return serial;
}

/* The next message from p's connection, or NULL if none came within
 * timeout_ms */
static DBusMessage *
peer_receive (Peer *p,
              int   timeout_ms)
{
  DBusMessage *m;

  if (p->gc != NULL)
    return g_async_queue_timeout_pop (p->queue, (guint64) timeout_ms * 1000);

  m = dbus_connection_pop_message (p->dc);
  if (m == NULL)
    {
      dbus_connection_read_write (p->dc, timeout_ms);
      m = dbus_connection_pop_message (p->dc);
    }
  return m;
}

/* The next message p received (passed over by peer_wait() or new), or
 * NULL if none came within timeout_ms */
static DBusMessage *
peer_pop (Peer *p,
          int   timeout_ms)
{
  if (!g_queue_is_empty (&p->stash))
    return g_queue_pop_head (&p->stash);
  return peer_receive (p, timeout_ms);
}

typedef gboolean (*MessagePredicate) (DBusMessage *m, gconstpointer data);

/* The first message p received that matches pred, waiting for it if
 * needed; the others stay in order for later peer_wait()s and peer_pop()s */
static DBusMessage *
peer_wait (Peer             *p,
           MessagePredicate  pred,
           gconstpointer     data)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;
  GList *l;

  for (l = p->stash.head; l != NULL; l = l->next)
    if (pred (l->data, data))
      {
        DBusMessage *m = l->data;

        g_queue_delete_link (&p->stash, l);
        return m;
      }

  while (TRUE)
    {
      DBusMessage *m = peer_receive (p, 100);

      if (m != NULL)
        {
          if (pred (m, data))
            return m;
          g_queue_push_tail (&p->stash, m);
        }
      if (g_get_monotonic_time () > deadline)
        g_error ("%s timed out waiting for a message", p->name);
      g_assert_true (peer_is_connected (p));
    }
}

/* Reads what has arrived for p so far, without waiting, into its stash,
 * as a client reading its socket while it sends does */
static void
peer_stash_arrived (Peer *p)
{
  DBusMessage *m;

  while ((m = peer_receive (p, 0)) != NULL)
    g_queue_push_tail (&p->stash, m);
}

static gboolean
is_reply_to (DBusMessage *m, gconstpointer serial)
{
  return dbus_message_get_reply_serial (m) == GPOINTER_TO_UINT (serial);
}

static gboolean
is_test_call (DBusMessage *m, gconstpointer data)
{
  return dbus_message_get_type (m) == DBUS_MESSAGE_TYPE_METHOD_CALL &&
      dbus_message_has_path (m, TEST_PATH);
}

/* A message of the test (not from the bus driver), on any interface */
static gboolean
is_from_test (DBusMessage *m, gconstpointer data)
{
  return g_strcmp0 (dbus_message_get_sender (m), DBUS_SERVICE_DBUS) != 0 &&
      dbus_message_get_interface (m) != NULL &&
      g_str_has_prefix (dbus_message_get_interface (m), TEST_IFACE);
}

static gboolean
is_signal_named (DBusMessage *m, gconstpointer member)
{
  return dbus_message_is_signal (m, TEST_IFACE, member);
}

/* Sends call from p and returns the reply or error */
static DBusMessage *
peer_call (Peer        *p,
           DBusMessage *call)
{
  dbus_uint32_t serial = peer_send (p, call);

  return peer_wait (p, is_reply_to, GUINT_TO_POINTER (serial));
}

/* Calls a method of the bus driver (path, interface) and returns its
 * method reply; an error reply fails the test */
static DBusMessage *
driver_call (Peer        *p,
             const gchar *interface,
             const gchar *member,
             int          first_arg_type,
             ...)
{
  DBusMessage *call = dbus_message_new_method_call (DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                                                    interface, member);
  DBusMessage *reply;
  va_list ap;

  va_start (ap, first_arg_type);
  g_assert_true (dbus_message_append_args_valist (call, first_arg_type, ap));
  va_end (ap);
  reply = peer_call (p, call);
  dbus_message_unref (call);
  if (dbus_message_get_type (reply) == DBUS_MESSAGE_TYPE_ERROR)
    {
      const char *text = "";

      dbus_message_get_args (reply, NULL, DBUS_TYPE_STRING, &text, DBUS_TYPE_INVALID);
      g_error ("%s.%s: %s: %s", interface, member, dbus_message_get_error_name (reply), text);
    }
  g_assert_cmpstr (dbus_message_get_sender (reply), ==, DBUS_SERVICE_DBUS);
  return reply;
}

static void
peer_add_match (Peer        *p,
                const gchar *rule)
{
  dbus_message_unref (driver_call (p, DBUS_INTERFACE_DBUS, "AddMatch",
                                   DBUS_TYPE_STRING, &rule, DBUS_TYPE_INVALID));
}

/* p becomes a monitor of everything */
static void
become_monitor (Peer *p)
{
  const char *no_rules[] = { NULL };
  const char **rules = no_rules;
  dbus_uint32_t flags = 0;

  dbus_message_unref (driver_call (p, "org.freedesktop.DBus.Monitoring", "BecomeMonitor",
                                   DBUS_TYPE_ARRAY, DBUS_TYPE_STRING, &rules, 0,
                                   DBUS_TYPE_UINT32, &flags, DBUS_TYPE_INVALID));
}

/* A round trip through the bus driver: when it returns, the daemon has
 * handled everything p sent before */
static void
peer_sync (Peer *p)
{
  dbus_message_unref (driver_call (p, DBUS_INTERFACE_DBUS, "GetId", DBUS_TYPE_INVALID));
}

/* ---- the daemon's statistics and the kernel feature ---------------------- */

/* Whether the running kernel has multicast AF_UNIX (what libdbus checks
 * before it asks for promotion) */
static gboolean
kernel_has_mcast (void)
{
  int fd = socket (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  int value = 0;
  socklen_t len = sizeof (value);
  gboolean ok;

  g_assert_cmpint (fd, >=, 0);
  ok = getsockopt (fd, SOL_UNIX, UNIX_PASSID, &value, &len) == 0;
  close (fd);
  return ok;
}

/* For tests of multicast internals: skip on a stock kernel */
static gboolean
skip_unless_mcast (void)
{
  if (kernel_has_mcast ())
    return FALSE;
  g_test_skip ("the kernel has no multicast AF_UNIX: the bus is classic");
  return TRUE;
}

/* A counter from org.freedesktop.DBus.Debug.Stats.GetStats; fails the
 * test if the daemon does not report it */
static guint64
get_stat (Peer        *p,
          const gchar *key)
{
  DBusMessage *reply = driver_call (p, "org.freedesktop.DBus.Debug.Stats", "GetStats",
                                    DBUS_TYPE_INVALID);
  DBusMessageIter dict, entry, variant;
  gboolean found = FALSE;
  guint64 value = 0;

  g_assert_true (dbus_message_iter_init (reply, &dict));
  g_assert_cmpint (dbus_message_iter_get_arg_type (&dict), ==, DBUS_TYPE_ARRAY);
  for (dbus_message_iter_recurse (&dict, &entry);
       dbus_message_iter_get_arg_type (&entry) == DBUS_TYPE_DICT_ENTRY;
       dbus_message_iter_next (&entry))
    {
      DBusMessageIter kv;
      const char *k;
      DBusBasicValue v;

      dbus_message_iter_recurse (&entry, &kv);
      dbus_message_iter_get_basic (&kv, &k);
      if (strcmp (k, key) != 0)
        continue;
      dbus_message_iter_next (&kv);
      dbus_message_iter_recurse (&kv, &variant);
      dbus_message_iter_get_basic (&variant, &v);
      switch (dbus_message_iter_get_arg_type (&variant))
        {
        case DBUS_TYPE_UINT32: value = v.u32; break;
        case DBUS_TYPE_INT32: value = v.i32; break;
        case DBUS_TYPE_UINT64: value = v.u64; break;
        case DBUS_TYPE_INT64: value = v.i64; break;
        default: g_error ("GetStats: %s is not an integer", key);
        }
      found = TRUE;
    }
  dbus_message_unref (reply);
  if (!found)
    g_error ("GetStats has no %s: the daemon reports no multicast statistics", key);
  return value;
}

/* Waits until the daemon's counter @key is above @before */
static void
wait_for_stat_above (Peer        *p,
                     const gchar *key,
                     guint64      before)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;

  while (get_stat (p, key) <= before)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_usleep (10000);
    }
}

/* How closely member p's peer filter follows its match rules
 * (GetConnectionStats' MulticastPeerFilterPrecision): "exact", "no-args",
 * "senders" or "signals"; fails the test if the daemon does not say */
static gchar *
peer_filter_precision (Peer *p)
{
  const char *name = p->name;
  DBusMessage *reply = driver_call (p, "org.freedesktop.DBus.Debug.Stats",
                                    "GetConnectionStats",
                                    DBUS_TYPE_STRING, &name, DBUS_TYPE_INVALID);
  DBusMessageIter dict, entry, kv, variant;
  gchar *precision = NULL;

  g_assert_true (dbus_message_iter_init (reply, &dict));
  for (dbus_message_iter_recurse (&dict, &entry);
       dbus_message_iter_get_arg_type (&entry) == DBUS_TYPE_DICT_ENTRY;
       dbus_message_iter_next (&entry))
    {
      const char *k, *v;

      dbus_message_iter_recurse (&entry, &kv);
      dbus_message_iter_get_basic (&kv, &k);
      if (strcmp (k, "MulticastPeerFilterPrecision") != 0)
        continue;
      dbus_message_iter_next (&kv);
      dbus_message_iter_recurse (&kv, &variant);
      g_assert_cmpint (dbus_message_iter_get_arg_type (&variant), ==, DBUS_TYPE_STRING);
      dbus_message_iter_get_basic (&variant, &v);
      precision = g_strdup (v);
    }
  dbus_message_unref (reply);
  if (precision == NULL)
    g_error ("GetConnectionStats of %s has no MulticastPeerFilterPrecision", p->name);
  return precision;
}

/* Checks that the daemon dispatched nothing but two GetStats calls since
 * MessagesDispatched was @before (p's call that read it, and this one) */
static void
assert_nothing_dispatched (Peer    *p,
                           guint64  before)
{
  guint64 dispatched = get_stat (p, "MessagesDispatched") - before;

  g_test_message ("the daemon dispatched %" G_GUINT64_FORMAT
                  " messages, the two GetStats calls included", dispatched);
  g_assert_cmpuint (dispatched, <=, 2);
}

/* Waits until the stat reaches expected (the daemon counts a member that
 * left when it has noticed the hang-up) */
static void
wait_for_stat (Peer        *p,
               const gchar *key,
               guint64      expected)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;
  guint64 v;

  while ((v = get_stat (p, key)) != expected)
    {
      if (g_get_monotonic_time () > deadline)
        g_error ("GetStats %s stayed %" G_GUINT64_FORMAT ", expected %" G_GUINT64_FORMAT,
                 key, v, expected);
      g_usleep (10000);
    }
}

/* ---- messages ------------------------------------------------------------ */

static DBusMessage *
new_call (const gchar *destination,
          const gchar *member,
          const gchar *text)
{
  DBusMessage *m = dbus_message_new_method_call (destination, TEST_PATH, TEST_IFACE, member);

  if (text != NULL)
    g_assert_true (dbus_message_append_args (m, DBUS_TYPE_STRING, &text, DBUS_TYPE_INVALID));
  return m;
}

static DBusMessage *
new_signal (const gchar   *path,
            const gchar   *interface,
            const gchar   *member,
            const gchar   *arg0,
            dbus_uint32_t  seq)
{
  DBusMessage *m = dbus_message_new_signal (path, interface, member);

  g_assert_true (dbus_message_append_args (m, DBUS_TYPE_STRING, &arg0,
                                           DBUS_TYPE_UINT32, &seq, DBUS_TYPE_INVALID));
  return m;
}

/* Sends the test signal @member (arg0, seq) from p */
static void
emit (Peer          *p,
      const gchar   *member,
      const gchar   *arg0,
      dbus_uint32_t  seq)
{
  DBusMessage *m = new_signal (TEST_PATH, TEST_IFACE, member, arg0, seq);

  peer_send (p, m);
  dbus_message_unref (m);
}

static dbus_uint32_t
signal_seq (DBusMessage *m)
{
  const char *arg0;
  dbus_uint32_t seq = 0;

  g_assert_true (dbus_message_get_args (m, NULL, DBUS_TYPE_STRING, &arg0,
                                        DBUS_TYPE_UINT32, &seq, DBUS_TYPE_INVALID));
  return seq;
}

/* server answers the next test call it receives: Echo(s) returns s, Fail
 * returns TEST_ERROR, anything else UnknownMethod.  Returns the call. */
static DBusMessage *
serve_one (Peer *server)
{
  DBusMessage *call = peer_wait (server, is_test_call, NULL);
  DBusMessage *reply;

  if (dbus_message_is_method_call (call, TEST_IFACE, "Echo"))
    {
      const char *text = NULL;

      g_assert_true (dbus_message_get_args (call, NULL, DBUS_TYPE_STRING, &text,
                                            DBUS_TYPE_INVALID));
      reply = dbus_message_new_method_return (call);
      g_assert_true (dbus_message_append_args (reply, DBUS_TYPE_STRING, &text,
                                               DBUS_TYPE_INVALID));
    }
  else if (dbus_message_is_method_call (call, TEST_IFACE, "Fail"))
    reply = dbus_message_new_error (call, TEST_ERROR, "failed as asked");
  else
    reply = dbus_message_new_error (call, DBUS_ERROR_UNKNOWN_METHOD, "no such method");
  peer_send (server, reply);
  dbus_message_unref (reply);
  return call;
}

/* caller calls member on destination, which server owns; checks what the
 * server got and returns the reply */
static DBusMessage *
call_served (Peer        *caller,
             Peer        *server,
             const gchar *destination,
             const gchar *member,
             const gchar *text)
{
  DBusMessage *call = new_call (destination, member, text);
  dbus_uint32_t serial = peer_send (caller, call);
  DBusMessage *got = serve_one (server);
  DBusMessage *reply;

  g_assert_cmpstr (dbus_message_get_member (got), ==, member);
  g_assert_cmpstr (dbus_message_get_sender (got), ==, caller->name);
  g_assert_cmpstr (dbus_message_get_destination (got), ==, destination);
  g_assert_cmpuint (dbus_message_get_serial (got), ==, serial);
  dbus_message_unref (got);
  dbus_message_unref (call);
  reply = peer_wait (caller, is_reply_to, GUINT_TO_POINTER (serial));
  g_assert_cmpstr (dbus_message_get_sender (reply), ==, server->name);
  g_assert_cmpstr (dbus_message_get_destination (reply), ==, caller->name);
  return reply;
}

static void
assert_echo (DBusMessage *reply,
             const gchar *text)
{
  const char *got = NULL;

  g_assert_cmpint (dbus_message_get_type (reply), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  g_assert_true (dbus_message_get_args (reply, NULL, DBUS_TYPE_STRING, &got,
                                        DBUS_TYPE_INVALID));
  g_assert_cmpstr (got, ==, text);
}

/* Stock's error for a call over max_replies_per_connection
 * (bus/connection.c) */
static void
assert_over_reply_limit (DBusMessage *m)
{
  const char *text = NULL;

  g_assert_cmpstr (dbus_message_get_error_name (m), ==, DBUS_ERROR_LIMITS_EXCEEDED);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, DBUS_SERVICE_DBUS);
  g_assert_true (dbus_message_get_args (m, NULL, DBUS_TYPE_STRING, &text, DBUS_TYPE_INVALID));
  g_assert_cmpstr (text, ==,
                   "The maximum number of pending replies per connection has been reached");
}

/* A method call and its reply from caller to server by unique name */
static void
echo_roundtrip (Peer        *caller,
                Peer        *server,
                const gchar *text)
{
  DBusMessage *reply = call_served (caller, server, server->name, "Echo", text);

  assert_echo (reply, text);
  dbus_message_unref (reply);
}

/* Checks that p received no message of the test so far: sender sends p a
 * unicast signal "Fence" and p must see it first (per-sender order) */
static void
assert_nothing_before_fence (Peer *sender,
                             Peer *p)
{
  DBusMessage *fence = new_signal (TEST_PATH, TEST_IFACE, "Fence", "", 0);
  DBusMessage *m;

  dbus_message_set_destination (fence, p->name);
  peer_send (sender, fence);
  dbus_message_unref (fence);
  m = peer_wait (p, is_from_test, NULL);
  if (!dbus_message_is_signal (m, TEST_IFACE, "Fence"))
    g_error ("%s received %s %s.%s from %s, which was not for it", p->name,
             dbus_message_type_to_string (dbus_message_get_type (m)),
             dbus_message_get_interface (m), dbus_message_get_member (m),
             dbus_message_get_sender (m));
  g_assert_cmpstr (dbus_message_get_sender (m), ==, sender->name);
  dbus_message_unref (m);
}

/* ---- parameters ----------------------------------------------------------- */

/* "member-gdbus" -> kinds[0..n-1] */
static guint
parse_kinds (gconstpointer  data,
             PeerKind      *kinds,
             guint          max)
{
  gchar **parts = g_strsplit (data, "-", -1);
  guint n;

  for (n = 0; parts[n] != NULL; n++)
    {
      g_assert_cmpuint (n, <, max);
      kinds[n] = peer_kind_from_string (parts[n]);
    }
  g_strfreev (parts);
  return n;
}

/* ---- promotion ------------------------------------------------------------ */

/* A libdbus client on unixseq: becomes a member; leaving ends membership */
static void
test_promotion_member (gconstpointer data)
{
  Peer *observer;
  Peer *member;
  guint64 before;

  if (skip_unless_mcast ())
    return;
  observer = peer_new (PEER_GDBUS);
  before = get_stat (observer, "MulticastMembers");
  member = peer_new (PEER_MEMBER);
  g_assert_cmpuint (get_stat (observer, "MulticastMembers"), ==, before + 1);
  /* the member's own view agrees */
  g_assert_cmpuint (get_stat (member, "MulticastMembers"), ==, before + 1);
  peer_free (member);
  wait_for_stat (observer, "MulticastMembers", before);
  peer_free (observer);
}

/* GDBus and libdbus on unix: stay classic */
static void
test_promotion_classic (gconstpointer data)
{
  Peer *observer;
  Peer *gdbus;
  Peer *classic;
  guint64 before;

  if (skip_unless_mcast ())
    return;
  observer = peer_new (PEER_MEMBER);
  before = get_stat (observer, "MulticastMembers");
  gdbus = peer_new (PEER_GDBUS);
  classic = peer_new (PEER_CLASSIC);
  echo_roundtrip (gdbus, classic, "classic");
  g_assert_cmpuint (get_stat (observer, "MulticastMembers"), ==, before);
  peer_free (gdbus);
  peer_free (classic);
  peer_free (observer);
}

/* ---- member traffic bypasses the daemon ------------------------------------ */

#define BYPASS_CALLS 1000

static void
test_bypass (gconstpointer data)
{
  Peer *a, *b;
  guint64 dispatched, copies, straight;
  guint i;

  if (skip_unless_mcast ())
    return;
  a = peer_new (PEER_MEMBER);
  b = peer_new (PEER_MEMBER);
  dispatched = get_stat (a, "MessagesDispatched");
  copies = get_stat (a, "MulticastCopiesDispatched");
  straight = get_stat (a, "MulticastStraightDispatched");

  for (i = 0; i < BYPASS_CALLS; i++)
    echo_roundtrip (a, b, "bypass");

  dispatched = get_stat (a, "MessagesDispatched") - dispatched;
  copies = get_stat (a, "MulticastCopiesDispatched") - copies;
  straight = get_stat (a, "MulticastStraightDispatched") - straight;
  g_test_message ("%u calls and replies between two members: the daemon dispatched "
                  "%" G_GUINT64_FORMAT " messages (%" G_GUINT64_FORMAT " group copies, %"
                  G_GUINT64_FORMAT " straight), GetStats included",
                  BYPASS_CALLS, dispatched, copies, straight);
  /* the three GetStats calls themselves are dispatched */
  g_assert_cmpuint (dispatched, <, BYPASS_CALLS / 10);
  peer_free (a);
  peer_free (b);
}

/* ---- calls, replies, errors ---------------------------------------------- */

static void
test_calls (gconstpointer data)
{
  PeerKind kinds[2];
  Peer *caller, *server;
  DBusMessage *reply;

  g_assert_cmpuint (parse_kinds (data, kinds, 2), ==, 2);
  caller = peer_new (kinds[0]);
  server = peer_new (kinds[1]);

  echo_roundtrip (caller, server, "hello");

  /* An error the server sends */
  reply = call_served (caller, server, server->name, "Fail", NULL);
  g_assert_cmpint (dbus_message_get_type (reply), ==, DBUS_MESSAGE_TYPE_ERROR);
  g_assert_cmpstr (dbus_message_get_error_name (reply), ==, TEST_ERROR);
  dbus_message_unref (reply);

  /* An unknown method: the server's UnknownMethod error */
  reply = call_served (caller, server, server->name, "NoSuchMethod", NULL);
  g_assert_cmpint (dbus_message_get_type (reply), ==, DBUS_MESSAGE_TYPE_ERROR);
  g_assert_cmpstr (dbus_message_get_error_name (reply), ==, DBUS_ERROR_UNKNOWN_METHOD);
  dbus_message_unref (reply);

  /* Nothing else reached the server */
  assert_nothing_before_fence (caller, server);
  peer_free (caller);
  peer_free (server);
}

/* A call to a name nobody owns: the daemon's error */
static void
test_no_such_name (gconstpointer data)
{
  Peer *caller = peer_new (peer_kind_from_string (data));
  const gchar *names[] = { "org.dbusmcast.BusTest.NoSuchName", ":1.99999999" };
  guint i;

  for (i = 0; i < G_N_ELEMENTS (names); i++)
    {
      DBusMessage *call = new_call (names[i], "Echo", "anyone?");
      DBusMessage *reply = peer_call (caller, call);

      g_assert_cmpint (dbus_message_get_type (reply), ==, DBUS_MESSAGE_TYPE_ERROR);
      g_assert_cmpstr (dbus_message_get_error_name (reply), ==, DBUS_ERROR_SERVICE_UNKNOWN);
      g_assert_cmpstr (dbus_message_get_sender (reply), ==, DBUS_SERVICE_DBUS);
      dbus_message_unref (reply);
      dbus_message_unref (call);
    }
  peer_free (caller);
}

/* ---- signals and match rules -------------------------------------------- */

/* receiver's rule matches exactly the "Match" signals of emitter with
 * arg0 "yes" on TEST_PATH; near misses in every key must not arrive, nor
 * anything at a client without a rule */
static void
test_signals (gconstpointer data)
{
  PeerKind kinds[2];
  Peer *emitter, *other, *receiver, *bystander;
  gchar *rule;
  struct
  {
    Peer *from;
    const gchar *path, *interface, *member, *arg0;
    gboolean matches;
  } sent[] = {
    { NULL, TEST_PATH, TEST_IFACE, "Match", "yes", TRUE },
    { NULL, TEST_PATH, TEST_IFACE, "Other", "yes", FALSE },
    { NULL, TEST_PATH, OTHER_IFACE, "Match", "yes", FALSE },
    { NULL, "/org/dbusmcast/BusTest/Other", TEST_IFACE, "Match", "yes", FALSE },
    { NULL, TEST_PATH, TEST_IFACE, "Match", "no", FALSE },
    { NULL, TEST_PATH, TEST_IFACE, "Match", "yes!", FALSE },
    { NULL, TEST_PATH, TEST_IFACE, "Match", "yes", TRUE },
  };
  guint i, seen;

  g_assert_cmpuint (parse_kinds (data, kinds, 2), ==, 2);
  emitter = peer_new (kinds[0]);
  other = peer_new (kinds[0]);
  receiver = peer_new (kinds[1]);
  bystander = peer_new (kinds[1]);
  for (i = 0; i < G_N_ELEMENTS (sent); i++)
    sent[i].from = emitter;

  rule = g_strdup_printf ("type='signal',sender='%s',interface='" TEST_IFACE "',"
                          "member='Match',path='" TEST_PATH "',arg0='yes'", emitter->name);
  peer_add_match (receiver, rule);
  g_free (rule);
  peer_add_match (bystander, "type='signal',interface='" TEST_IFACE "',member='End'");

  /* The same signal from another sender: a near miss in the sender key.
   * The round trip to the driver orders it before the emitter's. */
  {
    DBusMessage *m = new_signal (TEST_PATH, TEST_IFACE, "Match", "yes", 1000);

    peer_send (other, m);
    dbus_message_unref (m);
    peer_sync (other);
  }

  for (i = 0; i < G_N_ELEMENTS (sent); i++)
    {
      DBusMessage *m = new_signal (sent[i].path, sent[i].interface, sent[i].member,
                                   sent[i].arg0, i);

      peer_send (sent[i].from, m);
      dbus_message_unref (m);
    }
  {
    DBusMessage *m = new_signal (TEST_PATH, TEST_IFACE, "End", "yes", 99);

    peer_send (emitter, m);
    dbus_message_unref (m);
  }

  /* The bystander gets End, and nothing before it */
  {
    DBusMessage *m = peer_wait (bystander, is_from_test, NULL);

    g_assert_cmpstr (dbus_message_get_member (m), ==, "End");
    g_assert_cmpstr (dbus_message_get_sender (m), ==, emitter->name);
    dbus_message_unref (m);
  }

  /* The receiver gets exactly the matching ones, in order */
  for (i = 0, seen = 0; i < G_N_ELEMENTS (sent); i++)
    {
      DBusMessage *m;

      if (!sent[i].matches)
        continue;
      m = peer_wait (receiver, is_from_test, NULL);
      if (!dbus_message_is_signal (m, TEST_IFACE, "Match") || signal_seq (m) != i)
        g_error ("expected Match %u, got %s.%s seq %u from %s", i,
                 dbus_message_get_interface (m), dbus_message_get_member (m),
                 signal_seq (m), dbus_message_get_sender (m));
      g_assert_cmpstr (dbus_message_get_sender (m), ==, emitter->name);
      g_assert_cmpstr (dbus_message_get_path (m), ==, TEST_PATH);
      g_assert_null (dbus_message_get_destination (m));
      dbus_message_unref (m);
      seen++;
    }
  g_assert_cmpuint (seen, ==, 2);
  /* ... and neither End nor anything else so far */
  assert_nothing_before_fence (emitter, receiver);

  peer_free (emitter);
  peer_free (other);
  peer_free (receiver);
  peer_free (bystander);
}

/* ---- name ownership ------------------------------------------------------ */

typedef struct
{
  const gchar *name, *old_owner, *new_owner;
} OwnerChange;

static gboolean
is_owner_change (DBusMessage *m, gconstpointer data)
{
  return dbus_message_is_signal (m, DBUS_INTERFACE_DBUS, "NameOwnerChanged");
}

/* p subscribes to the NameOwnerChanged signals of name */
static void
watch_owner (Peer        *p,
             const gchar *name)
{
  gchar *rule = g_strdup_printf ("type='signal',sender='" DBUS_SERVICE_DBUS "',"
                                 "member='NameOwnerChanged',arg0='%s'", name);

  peer_add_match (p, rule);
  g_free (rule);
}

static void
expect_owner_change (Peer        *observer,
                     const gchar *name,
                     const gchar *old_owner,
                     const gchar *new_owner)
{
  DBusMessage *m = peer_wait (observer, is_owner_change, NULL);
  const char *n, *o, *nw;

  g_assert_cmpstr (dbus_message_get_sender (m), ==, DBUS_SERVICE_DBUS);
  g_assert_true (dbus_message_get_args (m, NULL, DBUS_TYPE_STRING, &n, DBUS_TYPE_STRING, &o,
                                        DBUS_TYPE_STRING, &nw, DBUS_TYPE_INVALID));
  g_assert_cmpstr (n, ==, name);
  g_assert_cmpstr (o, ==, old_owner);
  g_assert_cmpstr (nw, ==, new_owner);
  dbus_message_unref (m);
}

static gboolean
is_name_signal (DBusMessage *m, gconstpointer data)
{
  return dbus_message_is_signal (m, DBUS_INTERFACE_DBUS, "NameAcquired") ||
      dbus_message_is_signal (m, DBUS_INTERFACE_DBUS, "NameLost");
}

/* p's next NameAcquired/NameLost about name must be member */
static void
expect_name_signal (Peer        *p,
                    const gchar *member,
                    const gchar *name)
{
  while (TRUE)
    {
      DBusMessage *m = peer_wait (p, is_name_signal, NULL);
      const char *n = NULL;

      g_assert_true (dbus_message_get_args (m, NULL, DBUS_TYPE_STRING, &n, DBUS_TYPE_INVALID));
      /* NameAcquired of the unique name comes first on a new connection */
      if (strcmp (n, p->name) == 0)
        {
          dbus_message_unref (m);
          continue;
        }
      g_assert_cmpstr (n, ==, name);
      g_assert_cmpstr (dbus_message_get_member (m), ==, member);
      g_assert_cmpstr (dbus_message_get_destination (m), ==, p->name);
      dbus_message_unref (m);
      return;
    }
}

static guint32
request_or_release (Peer        *p,
                    const gchar *method,
                    const gchar *name)
{
  DBusMessage *reply;
  dbus_uint32_t flags = 0, result = 0;

  if (strcmp (method, "RequestName") == 0)
    reply = driver_call (p, DBUS_INTERFACE_DBUS, method, DBUS_TYPE_STRING, &name,
                         DBUS_TYPE_UINT32, &flags, DBUS_TYPE_INVALID);
  else
    reply = driver_call (p, DBUS_INTERFACE_DBUS, method, DBUS_TYPE_STRING, &name,
                         DBUS_TYPE_INVALID);
  g_assert_true (dbus_message_get_args (reply, NULL, DBUS_TYPE_UINT32, &result,
                                        DBUS_TYPE_INVALID));
  dbus_message_unref (reply);
  return result;
}

/* The peer filters compiled since before */
static guint64
compiled_since (Peer    *p,
                guint64  before)
{
  return get_stat (p, "MulticastPeerFilterCompilations") - before;
}

/* A well-known name that moves recompiles the peer filters of the members
 * it concerns only: its old and new owners, and the members whose rules
 * name it as sender; other members (here four, and whoever else is on the
 * bus) keep theirs */
static void
test_names_recompile (gconstpointer data)
{
  const gchar *name = "org.dbusmcast.BusTest.Moving";
  Peer *bystanders[4], *owner, *heir, *subscriber;
  gchar *rule;
  guint64 before;
  guint i;

  if (!kernel_has_mcast ())
    {
      g_test_skip ("the kernel has no multicast AF_UNIX: the bus is classic");
      return;
    }

  for (i = 0; i < G_N_ELEMENTS (bystanders); i++)
    bystanders[i] = peer_new (PEER_MEMBER);
  owner = peer_new (PEER_MEMBER);
  heir = peer_new (PEER_MEMBER);
  subscriber = peer_new (PEER_MEMBER);
  rule = g_strdup_printf ("type='signal',sender='%s'", name);
  peer_add_match (subscriber, rule);

  before = get_stat (owner, "MulticastPeerFilterCompilations");
  g_assert_cmpuint (request_or_release (owner, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  g_assert_cmpuint (compiled_since (owner, before), ==, 2);

  /* queued: nothing moved */
  before = get_stat (owner, "MulticastPeerFilterCompilations");
  g_assert_cmpuint (request_or_release (heir, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_IN_QUEUE);
  g_assert_cmpuint (compiled_since (owner, before), ==, 0);

  before = get_stat (owner, "MulticastPeerFilterCompilations");
  g_assert_cmpuint (request_or_release (owner, "ReleaseName", name), ==,
                    DBUS_RELEASE_NAME_REPLY_RELEASED);
  g_assert_cmpuint (compiled_since (owner, before), ==, 3);

  g_free (rule);
  peer_free (subscriber);
  peer_free (heir);
  peer_free (owner);
  for (i = 0; i < G_N_ELEMENTS (bystanders); i++)
    peer_free (bystanders[i]);
}

/* first owns a name, second queues for it, first releases it: the
 * signals, and calls to the name reach whoever owns it at the time */
static void
test_names (gconstpointer data)
{
  PeerKind kinds[3];
  Peer *first, *second, *observer;
  gchar *name;
  DBusMessage *reply;

  g_assert_cmpuint (parse_kinds (data, kinds, 3), ==, 3);
  first = peer_new (kinds[0]);
  second = peer_new (kinds[1]);
  observer = peer_new (kinds[2]);
  /* a name per test: from the observer's unique name, :1.23 -> Name_1_23 */
  name = g_strdup_printf ("org.dbusmcast.BusTest.Name_%s", observer->name + 1);
  g_strdelimit (name + strlen ("org.dbusmcast.BusTest.Name_"), ".", '_');
  watch_owner (observer, name);

  g_assert_cmpuint (request_or_release (first, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  expect_name_signal (first, "NameAcquired", name);
  expect_owner_change (observer, name, "", first->name);
  g_assert_cmpuint (request_or_release (second, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_IN_QUEUE);

  reply = call_served (observer, first, name, "Echo", "to first");
  assert_echo (reply, "to first");
  dbus_message_unref (reply);

  g_assert_cmpuint (request_or_release (first, "ReleaseName", name), ==,
                    DBUS_RELEASE_NAME_REPLY_RELEASED);
  expect_name_signal (first, "NameLost", name);
  expect_name_signal (second, "NameAcquired", name);
  expect_owner_change (observer, name, first->name, second->name);

  reply = call_served (observer, second, name, "Echo", "to second");
  assert_echo (reply, "to second");
  dbus_message_unref (reply);
  /* the call to the name did not reach the previous owner */
  assert_nothing_before_fence (observer, first);

  g_assert_cmpuint (request_or_release (second, "ReleaseName", name), ==,
                    DBUS_RELEASE_NAME_REPLY_RELEASED);
  expect_name_signal (second, "NameLost", name);
  expect_owner_change (observer, name, second->name, "");
  {
    DBusMessage *call = new_call (name, "Echo", "to nobody");

    reply = peer_call (observer, call);
    g_assert_cmpstr (dbus_message_get_error_name (reply), ==, DBUS_ERROR_SERVICE_UNKNOWN);
    dbus_message_unref (reply);
    dbus_message_unref (call);
  }
  assert_nothing_before_fence (observer, second);

  g_free (name);
  peer_free (first);
  peer_free (second);
  peer_free (observer);
}

/* Sends a driver call about @name (RequestName without flags,
 * ReleaseName) from p without waiting for its reply; returns its serial */
static dbus_uint32_t
name_call_async (Peer        *p,
                 const gchar *method,
                 const gchar *name)
{
  DBusMessage *call = dbus_message_new_method_call (DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                                                    DBUS_INTERFACE_DBUS, method);
  dbus_uint32_t serial, flags = 0;

  g_assert_true (dbus_message_append_args (call, DBUS_TYPE_STRING, &name,
                                           DBUS_TYPE_INVALID));
  if (strcmp (method, "RequestName") == 0)
    g_assert_true (dbus_message_append_args (call, DBUS_TYPE_UINT32, &flags,
                                             DBUS_TYPE_INVALID));
  serial = peer_send (p, call);
  dbus_message_unref (call);
  return serial;
}

/* Counts, in seen, the HandOver signals that reached p (its stash) */
static void
count_handed_over (Peer   *p,
                   guint8 *seen,
                   guint   n)
{
  DBusMessage *m;

  /* What the kernel queued before the sync's reply is read before it */
  peer_sync (p);
  while ((m = g_queue_pop_head (&p->stash)) != NULL)
    {
      if (is_signal_named (m, "HandOver"))
        {
          guint seq = signal_seq (m);

          g_assert_cmpuint (seq, <, n);
          seen[seq]++;
        }
      dbus_message_unref (m);
    }
}

/* A well-known name moves back and forth between two members (the owner
 * releases it while the other is queued for it) while a third member
 * sends signals to the name: each reaches exactly one of the two, as
 * on a stock bus, and none passed the daemon */
static void
test_hand_over (gconstpointer data)
{
  enum { ROUNDS = 50, BURST = 20, N = ROUNDS * BURST };
  const gchar *name = "org.dbusmcast.BusTest.HandedOver";
  Peer *owners[2], *sender;
  guint8 seen[N] = { 0 };
  guint64 before;
  guint round, i;

  owners[0] = peer_new (PEER_MEMBER);
  owners[1] = peer_new (PEER_MEMBER);
  sender = peer_new (PEER_MEMBER);
  g_assert_cmpuint (request_or_release (owners[0], "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  g_assert_cmpuint (request_or_release (owners[1], "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_IN_QUEUE);
  before = kernel_has_mcast () ? get_stat (sender, "MulticastCopiesDispatched") : 0;

  for (round = 0; round < ROUNDS; round++)
    {
      Peer *owner = owners[round % 2];
      dbus_uint32_t serial = name_call_async (owner, "ReleaseName", name);
      DBusMessage *m;

      /* while the daemon moves the name */
      for (i = 0; i < BURST; i++)
        {
          m = new_signal (TEST_PATH, TEST_IFACE, "HandOver", "", round * BURST + i);
          dbus_message_set_destination (m, name);
          peer_send (sender, m);
          dbus_message_unref (m);
        }
      dbus_message_unref (peer_wait (owner, is_reply_to, GUINT_TO_POINTER (serial)));
      g_assert_cmpuint (request_or_release (owner, "RequestName", name), ==,
                        DBUS_REQUEST_NAME_REPLY_IN_QUEUE);
    }

  count_handed_over (owners[0], seen, N);
  count_handed_over (owners[1], seen, N);
  for (i = 0; i < N; i++)
    if (seen[i] != 1)
      g_error ("signal %u to the moving name reached %u of its owners", i, seen[i]);

  if (kernel_has_mcast ())
    {
      /* The driver calls only: two per round, two syncs, GetStats */
      guint64 copies = get_stat (sender, "MulticastCopiesDispatched") - before;

      g_test_message ("the daemon dispatched %" G_GUINT64_FORMAT " group copies", copies);
      g_assert_cmpuint (copies, <=, 2 * ROUNDS + 3);
    }

  peer_free (sender);
  peer_free (owners[1]);
  peer_free (owners[0]);
}

/* Serves the test calls that reach @old (a classic client that owned the
 * name, or NULL) and @heir (the member taking it) with empty replies,
 * until the caller has one answer to each call in @calls.  A stock
 * daemon reads the caller's calls in order and routes each as the name
 * stands then, so every call @heir answers comes after every call
 * answered otherwise (by @old, or with the error @error), and @heir gets
 * them in order.  Counts the answers by @heir and the others. */
static void
answer_moving_calls (Peer        *caller,
                     Peer        *old,
                     Peer        *heir,
                     GHashTable  *calls,
                     const gchar *error,
                     guint       *by_heir,
                     guint       *by_others)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US / 2;
  dbus_uint32_t heir_last = 0, heir_first = G_MAXUINT32, others_last = 0;
  Peer *servers[] = { heir, old };
  DBusMessage *m;
  guint i;

  while (g_hash_table_size (calls) > 0)
    {
      dbus_uint32_t serial;

      if (g_get_monotonic_time () > deadline)
        g_error ("%u calls to a moving name got no answer",
                 g_hash_table_size (calls));

      for (i = 0; i < G_N_ELEMENTS (servers) && servers[i] != NULL; i++)
        while ((m = peer_pop (servers[i], 0)) != NULL)
          {
            if (is_test_call (m, NULL))
              {
                DBusMessage *reply = dbus_message_new_method_return (m);

                if (servers[i] == heir && dbus_message_get_serial (m) < heir_last)
                  g_error ("call %u reached the new owner after call %u",
                           dbus_message_get_serial (m), heir_last);
                if (servers[i] == heir)
                  heir_last = dbus_message_get_serial (m);
                peer_send (servers[i], reply);
                dbus_message_unref (reply);
              }
            dbus_message_unref (m);
          }

      m = peer_receive (caller, 10);
      if (m == NULL)
        continue;
      serial = dbus_message_get_reply_serial (m);
      if (serial == 0)
        {
          dbus_message_unref (m); /* NameAcquired of its unique name */
          continue;
        }
      if (!g_hash_table_remove (calls, GUINT_TO_POINTER (serial)))
        g_error ("a second answer to call %u, from %s", serial,
                 dbus_message_get_sender (m));
      if (dbus_message_get_type (m) == DBUS_MESSAGE_TYPE_ERROR)
        g_assert_cmpstr (dbus_message_get_error_name (m), ==, error);
      else if (old == NULL || strcmp (dbus_message_get_sender (m), old->name) != 0)
        g_assert_cmpstr (dbus_message_get_sender (m), ==, heir->name);

      if (g_strcmp0 (dbus_message_get_sender (m), heir->name) == 0)
        {
          heir_first = MIN (heir_first, serial);
          (*by_heir)++;
        }
      else
        {
          others_last = MAX (others_last, serial);
          (*by_others)++;
        }
      dbus_message_unref (m);
    }

  if (others_last > heir_first)
    g_error ("call %u was answered by the new owner, call %u after it was not",
             heir_first, others_last);
}

/* Sends BURST calls to name from caller, in @calls, half of them before
 * heir has the name, half once it has */
static void
call_moving_name (Peer        *caller,
                  Peer        *heir,
                  const gchar *name,
                  GHashTable  *calls,
                  guint        burst)
{
  guint i;

  for (i = 0; i < burst; i++)
    {
      DBusMessage *m = new_call (name, "Echo", "moving");

      if (i == burst / 2)
        expect_name_signal (heir, "NameAcquired", name);
      g_hash_table_add (calls, GUINT_TO_POINTER (peer_send (caller, m)));
      dbus_message_unref (m);
    }
}

/* No second answer to a call of the caller came late */
static void
assert_no_late_answer (Peer *caller)
{
  DBusMessage *m;

  peer_sync (caller);
  while ((m = g_queue_pop_head (&caller->stash)) != NULL)
    {
      g_assert_cmpuint (dbus_message_get_reply_serial (m), ==, 0);
      dbus_message_unref (m);
    }
}

/* A member calls a well-known name nobody owns while another member
 * requests it: every call gets exactly one answer, the new owner's reply
 * or stock's ServiceUnknown, as a stock daemon answers each call as the
 * name stood when it read it, and the new owner gets the calls in the
 * order they were sent.  The daemon may read a call only after the
 * name moved to the member: it must not take it for one the kernel
 * delivered (design.md, "To a member"), nor deliver it behind the
 * caller's later calls, which the kernel delivered at once. */
static void
test_hand_over_from_nobody (gconstpointer data)
{
  enum { ROUNDS = 20, BURST = 10 };
  const gchar *name = "org.dbusmcast.BusTest.Arriving";
  Peer *service = peer_new (PEER_MEMBER);
  Peer *caller = peer_new (PEER_MEMBER);
  GHashTable *calls = g_hash_table_new (NULL, NULL);
  guint by_service = 0, unknown = 0, round;

  for (round = 0; round < ROUNDS; round++)
    {
      g_test_message ("round %u", round);
      name_call_async (service, "RequestName", name);
      call_moving_name (caller, service, name, calls, BURST);
      answer_moving_calls (caller, NULL, service, calls,
                           DBUS_ERROR_SERVICE_UNKNOWN, &by_service, &unknown);
      g_assert_cmpuint (request_or_release (service, "ReleaseName", name), ==,
                        DBUS_RELEASE_NAME_REPLY_RELEASED);
      expect_name_signal (service, "NameLost", name);
    }

  assert_no_late_answer (caller);
  g_test_message ("%u calls answered by the new owner, %u with ServiceUnknown",
                  by_service, unknown);
  g_assert_cmpuint (by_service + unknown, ==, ROUNDS * BURST);

  g_hash_table_unref (calls);
  peer_free (caller);
  peer_free (service);
}

/* A member calls a well-known name a classic client owns while the
 * client lets it go (data "release") or disconnects ("leave") and a
 * queued member gets it: the calls the daemon reads only after the move
 * go to the classic client, as stock read them before the move, or get
 * stock's NoReply if it has left; none reaches the member behind the
 * caller's later calls, which the kernel delivered at once. */
static void
test_hand_over_from_classic (gconstpointer data)
{
  enum { ROUNDS = 20, BURST = 10 };
  const gchar *name = "org.dbusmcast.BusTest.LeavingClassic";
  gboolean leave = g_strcmp0 (data, "leave") == 0;
  Peer *heir = peer_new (PEER_MEMBER);
  Peer *caller = peer_new (PEER_MEMBER);
  GHashTable *calls = g_hash_table_new (NULL, NULL);
  guint by_heir = 0, by_others = 0, round;

  for (round = 0; round < ROUNDS; round++)
    {
      Peer *owner = peer_new (PEER_CLASSIC);

      g_test_message ("round %u", round);
      g_assert_cmpuint (request_or_release (owner, "RequestName", name), ==,
                        DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
      g_assert_cmpuint (request_or_release (heir, "RequestName", name), ==,
                        DBUS_REQUEST_NAME_REPLY_IN_QUEUE);
      if (leave)
        g_clear_pointer (&owner, peer_free);
      else
        name_call_async (owner, "ReleaseName", name);

      call_moving_name (caller, heir, name, calls, BURST);
      answer_moving_calls (caller, owner, heir, calls,
                           leave ? DBUS_ERROR_NO_REPLY : NULL,
                           &by_heir, &by_others);
      if (owner != NULL)
        peer_free (owner);
      g_assert_cmpuint (request_or_release (heir, "ReleaseName", name), ==,
                        DBUS_RELEASE_NAME_REPLY_RELEASED);
      expect_name_signal (heir, "NameLost", name);
    }

  assert_no_late_answer (caller);
  g_test_message ("%u calls answered by the new owner, %u %s",
                  by_heir, by_others,
                  leave ? "with NoReply" : "by the old one");
  g_assert_cmpuint (by_heir + by_others, ==, ROUNDS * BURST);

  g_hash_table_unref (calls);
  peer_free (caller);
  peer_free (heir);
}

/* ---- activation ---------------------------------------------------------- */

static gboolean
is_name_vanished (DBusMessage *m, gconstpointer name)
{
  const char *n = NULL, *o, *nw = NULL;

  return is_owner_change (m, NULL) &&
      dbus_message_get_args (m, NULL, DBUS_TYPE_STRING, &n, DBUS_TYPE_STRING, &o,
                             DBUS_TYPE_STRING, &nw, DBUS_TYPE_INVALID) &&
      strcmp (n, name) == 0 && nw[0] == '\0';
}

/* A call to the activatable name starts the service (dbus-test-tool echo,
 * an empty reply to any call); stopping it afterwards leaves the next
 * test a name to activate again */
/* Stops the service that owns @name and waits until it has gone */
static void
stop_service (Peer        *p,
              const gchar *name)
{
  gchar *rule = g_strdup_printf ("type='signal',member='NameOwnerChanged',arg0='%s'",
                                 name);
  DBusMessage *reply, *vanished;
  dbus_uint32_t pid = 0;

  peer_add_match (p, rule);
  g_free (rule);
  reply = driver_call (p, DBUS_INTERFACE_DBUS, "GetConnectionUnixProcessID",
                       DBUS_TYPE_STRING, &name, DBUS_TYPE_INVALID);
  g_assert_true (dbus_message_get_args (reply, NULL, DBUS_TYPE_UINT32, &pid,
                                        DBUS_TYPE_INVALID));
  dbus_message_unref (reply);
  g_assert_cmpint (kill (pid, SIGTERM), ==, 0);
  vanished = peer_wait (p, is_name_vanished, name);
  dbus_message_unref (vanished);
}

static gboolean
name_has_owner (Peer        *p,
                const gchar *name)
{
  DBusMessage *reply = driver_call (p, DBUS_INTERFACE_DBUS, "NameHasOwner",
                                    DBUS_TYPE_STRING, &name, DBUS_TYPE_INVALID);
  dbus_bool_t has = FALSE;

  g_assert_true (dbus_message_get_args (reply, NULL, DBUS_TYPE_BOOLEAN, &has,
                                        DBUS_TYPE_INVALID));
  dbus_message_unref (reply);
  return has;
}

typedef struct
{
  const dbus_uint32_t *serials;
  guint n;
} SerialSet;

static gboolean
is_reply_to_one_of (DBusMessage *m, gconstpointer data)
{
  const SerialSet *set = data;
  guint i;

  for (i = 0; i < set->n; i++)
    if (dbus_message_get_reply_serial (m) == set->serials[i])
      return TRUE;
  return FALSE;
}

/* Waits for a method return to each of the @n calls @serials, which must
 * come in that order, and checks that no call got a second answer */
static void
expect_returns_in_order (Peer                *caller,
                         const dbus_uint32_t *serials,
                         guint                n)
{
  SerialSet set = { serials, n };
  DBusMessage *reply;
  GList *l;
  guint i;

  for (i = 0; i < n; i++)
    {
      reply = peer_wait (caller, is_reply_to_one_of, &set);
      g_assert_cmpint (dbus_message_get_type (reply), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
      g_assert_cmpuint (dbus_message_get_reply_serial (reply), ==, serials[i]);
      dbus_message_unref (reply);
    }
  peer_sync (caller);
  peer_stash_arrived (caller);
  for (l = caller->stash.head; l != NULL; l = l->next)
    g_assert_false (is_reply_to_one_of (l->data, &set));
}

/* How many calls /activation/sender-goes-on makes to the service while
 * it starts, and after */
#define STARTING_CALLS 4
#define STARTED_CALLS 3

/* A member's message that starts a service waits for the service, but
 * its sender does not, as with stock: the caller sends an fd (which goes
 * to the daemon alone, fenced) to a name whose service takes seconds to
 * start (a member too), then more calls to it, then calls another member,
 * and gets that answer while the service is still starting.  The service
 * gets every call once, in the order they were sent, also those sent
 * once it is up. */
static void
test_activation_sender_goes_on (gconstpointer data)
{
  dbus_uint32_t serials[1 + STARTING_CALLS + STARTED_CALLS];
  Peer *caller, *server;
  DBusMessage *m;
  guint64 members = 0;
  guint i;
  int fd;

  if (slow_activatable_name == NULL)
    {
      g_test_skip ("DBUS_MCAST_TEST_SLOW_ACTIVATABLE is not set");
      return;
    }
  caller = peer_new (PEER_MEMBER);
  server = peer_new (PEER_MEMBER);
  if (kernel_has_mcast ())
    members = get_stat (caller, "MulticastMembers");

  fd = open ("/dev/null", O_RDONLY | O_CLOEXEC);
  g_assert_cmpint (fd, >=, 0);
  m = new_call (slow_activatable_name, "Echo", "with an fd");
  g_assert_true (dbus_message_append_args (m, DBUS_TYPE_UNIX_FD, &fd, DBUS_TYPE_INVALID));
  serials[0] = peer_send (caller, m);
  dbus_message_unref (m);
  close (fd);
  for (i = 1; i <= STARTING_CALLS; i++)
    {
      m = new_call (slow_activatable_name, "Echo", "while it starts");
      serials[i] = peer_send (caller, m);
      dbus_message_unref (m);
    }

  dbus_message_unref (call_served (caller, server, server->name, "Echo", "meanwhile"));
  g_assert_false (name_has_owner (caller, slow_activatable_name));

  /* The service answers in the order it got the calls, once it is up;
   * then the calls sent after that */
  expect_returns_in_order (caller, serials, 1 + STARTING_CALLS);
  for (i = 1 + STARTING_CALLS; i < G_N_ELEMENTS (serials); i++)
    {
      m = new_call (slow_activatable_name, "Echo", "once it is up");
      serials[i] = peer_send (caller, m);
      dbus_message_unref (m);
    }
  expect_returns_in_order (caller, serials + 1 + STARTING_CALLS, STARTED_CALLS);

  /* The service was a member */
  if (kernel_has_mcast ())
    g_assert_cmpuint (get_stat (caller, "MulticastMembers"), ==, members + 1);
  stop_service (caller, slow_activatable_name);
  peer_free (server);
  peer_free (caller);
}

static void
test_activation (gconstpointer data)
{
  Peer *caller = peer_new (peer_kind_from_string (data));
  DBusMessage *call, *reply;

  if (activatable_name == NULL)
    {
      g_test_skip ("DBUS_MCAST_TEST_ACTIVATABLE is not set");
      peer_free (caller);
      return;
    }

  call = new_call (activatable_name, "Echo", "wake up");
  reply = peer_call (caller, call);
  g_assert_cmpint (dbus_message_get_type (reply), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  g_assert_cmpstr (dbus_message_get_sender (reply), !=, DBUS_SERVICE_DBUS);
  dbus_message_unref (reply);
  dbus_message_unref (call);

  stop_service (caller, activatable_name);
  peer_free (caller);
}

/* ---- file descriptors, big messages, order --------------------------------- */

/* A unicast signal "Item" with seq, and optionally a unix fd and a payload */
static DBusMessage *
new_item (const gchar   *destination,
          dbus_uint32_t  seq,
          int            fd,
          gsize          payload_len)
{
  DBusMessage *m = dbus_message_new_signal (TEST_PATH, TEST_IFACE, "Item");
  guchar *payload = g_malloc (payload_len + 1);
  gsize i;

  for (i = 0; i < payload_len; i++)
    payload[i] = (guchar) (i * 7 + seq);
  dbus_message_set_destination (m, destination);
  g_assert_true (dbus_message_append_args (m, DBUS_TYPE_UINT32, &seq,
                                           DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &payload,
                                           (int) payload_len, DBUS_TYPE_INVALID));
  if (fd >= 0)
    g_assert_true (dbus_message_append_args (m, DBUS_TYPE_UNIX_FD, &fd, DBUS_TYPE_INVALID));
  g_free (payload);
  return m;
}

/* Checks an Item: its seq, its payload; returns its fd or -1 */
static int
check_item (DBusMessage   *m,
            dbus_uint32_t  seq,
            gsize          payload_len)
{
  DBusMessageIter iter;
  dbus_uint32_t got;
  const guchar *payload;
  int n, i, fd = -1;

  g_assert_true (dbus_message_is_signal (m, TEST_IFACE, "Item"));
  g_assert_true (dbus_message_iter_init (m, &iter));
  dbus_message_iter_get_basic (&iter, &got);
  if (got != seq)
    g_error ("got item %u, expected %u", got, seq);
  g_assert_true (dbus_message_iter_next (&iter));
  {
    DBusMessageIter array;

    dbus_message_iter_recurse (&iter, &array);
    dbus_message_iter_get_fixed_array (&array, &payload, &n);
  }
  g_assert_cmpint (n, ==, (int) payload_len);
  for (i = 0; i < n; i++)
    if (payload[i] != (guchar) (i * 7 + seq))
      g_error ("item %u: byte %d is %u, expected %u", seq, i, payload[i],
               (guchar) (i * 7 + seq));
  if (dbus_message_iter_next (&iter))
    {
      g_assert_cmpint (dbus_message_iter_get_arg_type (&iter), ==, DBUS_TYPE_UNIX_FD);
      dbus_message_iter_get_basic (&iter, &fd);
    }
  return fd;
}

static gboolean
is_item (DBusMessage *m, gconstpointer data)
{
  return dbus_message_is_signal (m, TEST_IFACE, "Item");
}

/* An fd sent in a message works at the receiver: data written to it
 * arrives at the sender's end of the pipe */
static void
check_fd_works (int fd,
                int read_end)
{
  char buf[8] = { 0 };

  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (write (fd, "fdpass", 6), ==, 6);
  close (fd);
  g_assert_cmpint (read (read_end, buf, sizeof (buf)), ==, 6);
  g_assert_cmpstr (buf, ==, "fdpass");
}

static void
test_fd_passing (gconstpointer data)
{
  PeerKind kinds[2];
  Peer *sender, *receiver;
  int pipe_fds[2];
  DBusMessage *m;
  dbus_uint32_t serial;

  g_assert_cmpuint (parse_kinds (data, kinds, 2), ==, 2);
  sender = peer_new (kinds[0]);
  receiver = peer_new (kinds[1]);
  g_assert_true (dbus_connection_can_send_type (sender->dc, DBUS_TYPE_UNIX_FD));
  g_assert_cmpint (pipe (pipe_fds), ==, 0);

  m = new_item (receiver->name, 1, pipe_fds[1], 16);
  peer_send (sender, m);
  dbus_message_unref (m);
  close (pipe_fds[1]);

  m = peer_wait (receiver, is_item, NULL);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, sender->name);
  check_fd_works (check_item (m, 1, 16), pipe_fds[0]);
  dbus_message_unref (m);
  /* the daemon path leaves the fast path working */
  echo_roundtrip (sender, receiver, "after fd");
  echo_roundtrip (receiver, sender, "after fd, back");

  /* a call with an fd keeps its serial through the daemon: the reply
   * answers it */
  m = new_call (receiver->name, "Echo", "fd call");
  g_assert_true (dbus_message_append_args (m, DBUS_TYPE_UNIX_FD, &pipe_fds[0],
                                           DBUS_TYPE_INVALID));
  serial = peer_send (sender, m);
  dbus_message_unref (m);
  m = serve_one (receiver);
  g_assert_cmpuint (dbus_message_get_serial (m), ==, serial);
  dbus_message_unref (m);
  m = peer_wait (sender, is_reply_to, GUINT_TO_POINTER (serial));
  assert_echo (m, "fd call");
  dbus_message_unref (m);
  close (pipe_fds[0]);
  peer_free (sender);
  peer_free (receiver);
}

#define LARGE_SIZE (1024 * 1024)

static void
test_large (gconstpointer data)
{
  PeerKind kinds[2];
  Peer *sender, *receiver;
  DBusMessage *m;

  g_assert_cmpuint (parse_kinds (data, kinds, 2), ==, 2);
  sender = peer_new (kinds[0]);
  receiver = peer_new (kinds[1]);

  m = new_item (receiver->name, 7, -1, LARGE_SIZE);
  peer_send (sender, m);
  dbus_message_unref (m);
  m = peer_wait (receiver, is_item, NULL);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, sender->name);
  g_assert_cmpint (check_item (m, 7, LARGE_SIZE), ==, -1);
  dbus_message_unref (m);
  echo_roundtrip (sender, receiver, "after a large message");
  peer_free (sender);
  peer_free (receiver);
}

/* A member's message longer than one packet goes to the daemon alone, in
 * fragments.  Here every full fragment after the first is, byte for byte,
 * a whole call to the receiver, which the daemon's filter refuses from
 * the group (a member's name): only copies from the group may be
 * filtered, or the daemon reassembles a message with holes and an honest
 * sender is disconnected for bytes it only carried. */
static void
test_large_lookalike (gconstpointer data)
{
  PeerKind kinds[2];
  Peer *sender, *receiver;
  DBusMessage *m, *fake;
  guchar *payload, *filler;
  const guchar *got;
  char *bytes, *fake_bytes;
  int len, fake_len, n;
  guint64 straight = 0;
  gboolean promoted;
  dbus_uint32_t body_len, seq = 9;
  gsize header_len, at;
  DBusMessageIter iter, array;

  g_assert_cmpuint (parse_kinds (data, kinds, 2), ==, 2);
  sender = peer_new (kinds[0]);
  receiver = peer_new (kinds[1]);
  promoted = kinds[0] == PEER_MEMBER && kernel_has_mcast ();
  if (promoted)
    straight = get_stat (sender, "MulticastStraightDispatched");

  /* The lookalike fills a packet exactly, as a genuine group message
   * would: a call whose byte array makes it DBUS_SEQPACKET_FRAGMENT_SIZE
   * long */
  filler = g_malloc0 (DBUS_SEQPACKET_FRAGMENT_SIZE);
  n = 0;
  do
    {
      fake = dbus_message_new_method_call (receiver->name, TEST_PATH, TEST_IFACE, "Fake");
      dbus_message_set_sender (fake, sender->name);
      dbus_message_set_serial (fake, 1);
      g_assert_true (dbus_message_append_args (fake, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE,
                                               &filler, n, DBUS_TYPE_INVALID));
      g_assert_true (dbus_message_marshal (fake, &fake_bytes, &fake_len));
      dbus_message_unref (fake);
      if (fake_len != DBUS_SEQPACKET_FRAGMENT_SIZE)
        {
          n += DBUS_SEQPACKET_FRAGMENT_SIZE - fake_len;
          dbus_free (fake_bytes);
        }
    }
  while (fake_len != DBUS_SEQPACKET_FRAGMENT_SIZE);
  g_free (filler);

  /* Where the payload starts once the message is on the wire, with the
   * SENDER the member's libdbus writes */
  payload = g_malloc0 (LARGE_SIZE);
  m = dbus_message_new_signal (TEST_PATH, TEST_IFACE, "Item");
  dbus_message_set_destination (m, receiver->name);
  dbus_message_set_sender (m, sender->name);
  dbus_message_set_serial (m, 1);
  g_assert_true (dbus_message_append_args (m, DBUS_TYPE_UINT32, &seq,
                                           DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &payload,
                                           LARGE_SIZE, DBUS_TYPE_INVALID));
  g_assert_true (dbus_message_marshal (m, &bytes, &len));
  memcpy (&body_len, bytes + 4, sizeof (body_len));
  header_len = len - body_len;
  dbus_free (bytes);
  dbus_message_unref (m);

  /* uint32 seq, then the array's length: the bytes start 8 into the body */
  for (at = DBUS_SEQPACKET_FRAGMENT_SIZE;
       at + fake_len <= header_len + 8 + LARGE_SIZE;
       at += DBUS_SEQPACKET_FRAGMENT_SIZE)
    memcpy (payload + at - header_len - 8, fake_bytes, fake_len);
  dbus_free (fake_bytes);

  m = dbus_message_new_signal (TEST_PATH, TEST_IFACE, "Item");
  dbus_message_set_destination (m, receiver->name);
  g_assert_true (dbus_message_append_args (m, DBUS_TYPE_UINT32, &seq,
                                           DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &payload,
                                           LARGE_SIZE, DBUS_TYPE_INVALID));
  peer_send (sender, m);
  dbus_message_unref (m);

  m = peer_wait (receiver, is_item, NULL);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, sender->name);
  g_assert_true (dbus_message_iter_init (m, &iter));
  g_assert_true (dbus_message_iter_next (&iter));
  dbus_message_iter_recurse (&iter, &array);
  dbus_message_iter_get_fixed_array (&array, &got, &n);
  g_assert_cmpint (n, ==, LARGE_SIZE);
  g_assert_true (memcmp (got, payload, LARGE_SIZE) == 0);
  dbus_message_unref (m);
  g_free (payload);

  /* It went the daemon's way, and the sender is still connected */
  if (promoted)
    g_assert_cmpuint (get_stat (sender, "MulticastStraightDispatched"), >, straight);
  echo_roundtrip (sender, receiver, "after a lookalike fragment");
  peer_free (sender);
  peer_free (receiver);
}

#define ORDER_ITEMS 60

/* Items that take the daemon path (fds, over one fragment) interleaved
 * with small ones: the receiver sees them in send order */
static gsize
order_payload (guint seq)
{
  return seq % 5 == 2 ? 3 * DBUS_SEQPACKET_FRAGMENT_SIZE / 2 : 8;
}

static gboolean
order_has_fd (guint seq)
{
  return seq % 3 == 1;
}

static void
test_order (gconstpointer data)
{
  PeerKind kinds[2];
  Peer *sender, *receiver;
  int pipe_fds[2];
  guint i;

  g_assert_cmpuint (parse_kinds (data, kinds, 2), ==, 2);
  sender = peer_new (kinds[0]);
  receiver = peer_new (kinds[1]);
  g_assert_cmpint (pipe (pipe_fds), ==, 0);

  for (i = 0; i < ORDER_ITEMS; i++)
    {
      DBusMessage *m = new_item (receiver->name, i, order_has_fd (i) ? pipe_fds[1] : -1,
                                 order_payload (i));

      peer_send (sender, m);
      dbus_message_unref (m);
      /* The receiver reads meanwhile: a member's messages wait in the
       * kernel, which does not buffer a megabyte for a receiver that
       * never reads as a stock daemon does (doc/design.md) */
      peer_stash_arrived (receiver);
    }
  close (pipe_fds[1]);

  for (i = 0; i < ORDER_ITEMS; i++)
    {
      DBusMessage *m = peer_wait (receiver, is_item, NULL);
      int fd = check_item (m, i, order_payload (i));

      g_assert_cmpstr (dbus_message_get_sender (m), ==, sender->name);
      if (order_has_fd (i))
        check_fd_works (fd, pipe_fds[0]);
      else
        g_assert_cmpint (fd, ==, -1);
      dbus_message_unref (m);
    }
  close (pipe_fds[0]);
  peer_free (sender);
  peer_free (receiver);
}

/* ---- isolation: nobody waits for a client that stops reading ------------ */

#define STALLED_SIGNALS 300
/* Each carries this much: together more than a member's budget in the
 * kernel (the send buffer of the daemon's end, 208 KiB by default), so
 * the kernel diverts the subscriber's copies */
#define STALLED_SIZE 2048
/* The last of them is longer than a packet: the daemon routes it */
#define STALLED_LARGE_SIZE 100000

/* A subscriber that stops reading (a connection this thread does not
 * read, as a program stopped in a debugger) holds nobody back: the
 * emitter's signals go out, the last one too, longer than the group
 * carries, and its call to a third client is answered at once.  Once the
 * subscriber reads again, it gets every signal, in order, once.  Between
 * members, the subscriber's copies went through the daemon meanwhile
 * (MulticastDiverted), the daemon held the kernel's copies behind the
 * long signal (MulticastHolds), and the kernel delivers to the subscriber
 * directly again once the daemon has written them all (MulticastResumes). */
static void
test_stalled_subscriber (gconstpointer data)
{
  PeerKind kinds[3];
  Peer *emitter, *subscriber, *callee;
  gboolean diverts;
  guint64 diverted = 0, resumes = 0, holds = 0;
  gchar *large = g_strnfill (STALLED_LARGE_SIZE, 'l');
  gchar *filler = g_strnfill (STALLED_SIZE, 's');
  DBusMessage *m;
  gchar *rule;
  guint i;

  g_assert_cmpuint (parse_kinds (data, kinds, 3), ==, 3);
  emitter = peer_new (kinds[0]);
  subscriber = peer_new (kinds[1]);
  callee = peer_new (kinds[2]);
  rule = g_strdup_printf ("type='signal',sender='%s',interface='%s'",
                          emitter->name, TEST_IFACE);
  peer_add_match (subscriber, rule);
  /* the kernel diverts group copies; a classic emitter's signals reach
   * the subscriber through the daemon, which queues them as stock does */
  diverts = kinds[0] == PEER_MEMBER && kinds[1] == PEER_MEMBER && kernel_has_mcast ();
  if (diverts)
    {
      diverted = get_stat (emitter, "MulticastDiverted");
      resumes = get_stat (emitter, "MulticastResumes");
      holds = get_stat (emitter, "MulticastHolds");
    }

  for (i = 0; i < STALLED_SIGNALS; i++)
    {
      emit (emitter, "Tick",
                      i == STALLED_SIGNALS - 1 ? large : filler, i);
    }
  echo_roundtrip (emitter, callee, "not held back");
  if (diverts)
    {
      g_assert_cmpuint (get_stat (emitter, "MulticastDiverted"), >, diverted);
      g_assert_cmpuint (get_stat (emitter, "MulticastHolds"), >, holds);
    }

  for (i = 0; i <= STALLED_SIGNALS; i++)
    {
      if (i == STALLED_SIGNALS)
        {
          /* and nothing twice: the next signal is the next one read */
          emit (emitter, "Tick", "after", i);
        }
      m = peer_wait (subscriber, is_signal_named, "Tick");
      g_assert_cmpuint (signal_seq (m), ==, i);
      g_assert_cmpstr (dbus_message_get_sender (m), ==, emitter->name);
      dbus_message_unref (m);
    }
  if (diverts)
    wait_for_stat_above (emitter, "MulticastResumes", resumes);

  g_free (rule);
  g_free (filler);
  g_free (large);
  peer_free (callee);
  peer_free (subscriber);
  peer_free (emitter);
}

#define LIMITED_PAYLOAD 4096
/* With max_outgoing_bytes 8 KiB the queue is full after about 50 */
#define LIMITED_MAX_CALLS 2000

/* Has @caller call @callee, which does not read, on the limited bus until
 * a call is refused with stock's LimitsExceeded error; checks that the
 * calls before the refused one reach the callee, in order, once it reads,
 * and returns how many they were */
static guint
calls_before_refusal (PeerKind caller_kind,
                      PeerKind callee_kind)
{
  Peer *caller = peer_new_on (caller_kind, limited_address);
  Peer *callee = peer_new_on (callee_kind, limited_address);
  gchar *payload = g_strnfill (LIMITED_PAYLOAD, 'q');
  DBusMessage *refused = NULL, *m;
  dbus_uint32_t *serials = g_new0 (dbus_uint32_t, LIMITED_MAX_CALLS);
  guint i, n, sent;

  for (sent = 0; sent < LIMITED_MAX_CALLS && refused == NULL; sent++)
    {
      m = new_call (callee->name, "Echo", payload);
      serials[sent] = peer_send (caller, m);
      dbus_message_unref (m);
      while (refused == NULL && (m = peer_pop (caller, 0)) != NULL)
        {
          if (dbus_message_get_type (m) == DBUS_MESSAGE_TYPE_ERROR)
            refused = m;
          else
            dbus_message_unref (m);
        }
    }
  g_assert_nonnull (refused);
  g_assert_cmpstr (dbus_message_get_error_name (refused), ==, DBUS_ERROR_LIMITS_EXCEEDED);
  g_assert_cmpstr (dbus_message_get_sender (refused), ==, DBUS_SERVICE_DBUS);

  /* every call before the refused one arrived, in order */
  for (n = 0; serials[n] != dbus_message_get_reply_serial (refused); n++)
    g_assert_cmpuint (n + 1, <, sent);
  g_assert_cmpuint (n, >, 0);
  for (i = 0; i < n; i++)
    {
      m = peer_wait (callee, is_test_call, NULL);
      g_assert_cmpuint (dbus_message_get_serial (m), ==, serials[i]);
      dbus_message_unref (m);
    }

  dbus_message_unref (refused);
  peer_free (callee);
  peer_free (caller);
  g_free (serials);
  g_free (payload);
  return n;
}

/* On a bus whose outgoing queues are small, calls to a callee that does
 * not read are refused with stock's LimitsExceeded error once its queue
 * is full, whichever path they take, and after as many calls as between
 * two classic clients: what the kernel holds for a member counts as the
 * socket buffer of a classic client does, not once more against the
 * bus's limit */
static void
test_limits (gconstpointer data)
{
  PeerKind kinds[2];
  guint stock, n;

  if (limited_address == NULL)
    {
      g_test_skip ("DBUS_MCAST_TEST_LIMITED_ADDRESS is not set");
      return;
    }

  g_assert_cmpuint (parse_kinds (data, kinds, 2), ==, 2);
  stock = calls_before_refusal (PEER_CLASSIC, PEER_CLASSIC);
  n = calls_before_refusal (kinds[0], kinds[1]);
  g_test_message ("%s: refused after %u calls, classic-classic after %u",
                  (const gchar *) data, n, stock);
  g_assert_cmpuint (2 * n, >=, stock);
  g_assert_cmpuint (n, <=, 2 * stock);
}

/* ---- what a client sends itself ------------------------------------------ */

/* A client receives what it sends itself, as stock dbus-daemon delivers
 * it: a call to its unique name and to a well-known name it owns, and the
 * replies it sends itself; its own signal when one of its rules matches.
 * A member's come back through the kernel, the daemon dispatching none */
static void
test_self (gconstpointer data)
{
  PeerKind kind = peer_kind_from_string (data);
  const gchar *name = "org.dbusmcast.BusTest.Self";
  Peer *p = peer_new (kind);
  guint64 dispatched = 0;
  DBusMessage *m;

  peer_add_match (p, "type='signal',interface='" TEST_IFACE "',member='ToSelf'");
  g_assert_cmpuint (request_or_release (p, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  if (kind == PEER_MEMBER && kernel_has_mcast ())
    dispatched = get_stat (p, "MessagesDispatched");

  emit (p, "ToSelf", "me", 1);
  m = peer_wait (p, is_signal_named, "ToSelf");
  g_assert_cmpstr (dbus_message_get_sender (m), ==, p->name);
  g_assert_cmpuint (signal_seq (m), ==, 1);
  dbus_message_unref (m);

  m = call_served (p, p, p->name, "Echo", "to my unique name");
  assert_echo (m, "to my unique name");
  dbus_message_unref (m);
  m = call_served (p, p, name, "Echo", "to my well-known name");
  assert_echo (m, "to my well-known name");
  dbus_message_unref (m);

  if (kind == PEER_MEMBER && kernel_has_mcast ())
    assert_nothing_dispatched (p, dispatched);

  /* each of them once */
  peer_sync (p);
  while ((m = peer_pop (p, 0)) != NULL)
    {
      g_assert_false (is_from_test (m, NULL));
      dbus_message_unref (m);
    }
  peer_free (p);
}

/* ---- what a call to the bus driver changes --------------------------------- */

/* Sends AddMatch(rule) from p without waiting for, or asking for, a reply,
 * as dbus_bus_add_match() without an error does */
static void
add_match_no_reply (Peer        *p,
                    const gchar *rule)
{
  DBusMessage *m = dbus_message_new_method_call (DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                                                 DBUS_INTERFACE_DBUS, "AddMatch");

  g_assert_true (dbus_message_append_args (m, DBUS_TYPE_STRING, &rule, DBUS_TYPE_INVALID));
  dbus_message_set_no_reply (m, TRUE);
  peer_send (p, m);
  dbus_message_unref (m);
}

/* An AddMatch takes effect before anything its client sends after it,
 * without waiting for its reply (as QtDBus and dbus-python send it): the
 * client asks a member service to emit a signal right after, and gets
 * the signal.  Many rules before the one that matters keep the daemon
 * busy meanwhile. */
static void
test_add_match_order (gconstpointer data)
{
  Peer *client = peer_new (peer_kind_from_string (data));
  Peer *service = peer_new (PEER_MEMBER);
  DBusMessage *m;
  guint i;

  for (i = 0; i < 100; i++)
    {
      gchar *rule = g_strdup_printf ("type='signal',interface='" TEST_IFACE "',"
                                     "member='Other%u'", i);

      add_match_no_reply (client, rule);
      g_free (rule);
    }
  add_match_no_reply (client, "type='signal',interface='" TEST_IFACE "',member='Asked'");
  m = new_call (service->name, "Emit", NULL);
  dbus_message_set_no_reply (m, TRUE);
  peer_send (client, m);
  dbus_message_unref (m);

  dbus_message_unref (peer_wait (service, is_test_call, NULL));
  emit (service, "Asked", "", 0);
  m = peer_wait (client, is_signal_named, "Asked");
  g_assert_cmpstr (dbus_message_get_sender (m), ==, service->name);
  dbus_message_unref (m);

  peer_free (service);
  peer_free (client);
}

static gboolean
is_owner_change_or_signal (DBusMessage *m, gconstpointer member)
{
  return is_owner_change (m, NULL) || is_signal_named (m, member);
}

/* A client that asks for a name without waiting for the reply and then
 * signals: an observer sees the name's NameOwnerChanged before the
 * signal, as stock sends them */
static void
test_request_name_order (gconstpointer data)
{
  const gchar *name = "org.dbusmcast.BusTest.Ordered";
  Peer *owner = peer_new (peer_kind_from_string (data));
  Peer *observer = peer_new (PEER_MEMBER);
  DBusMessage *m;
  guint32 flags = 0;

  watch_owner (observer, name);
  peer_add_match (observer, "type='signal',interface='" TEST_IFACE "',member='AfterName'");
  m = dbus_message_new_method_call (DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                                    DBUS_INTERFACE_DBUS, "RequestName");
  g_assert_true (dbus_message_append_args (m, DBUS_TYPE_STRING, &name,
                                           DBUS_TYPE_UINT32, &flags, DBUS_TYPE_INVALID));
  dbus_message_set_no_reply (m, TRUE);
  peer_send (owner, m);
  dbus_message_unref (m);
  emit (owner, "AfterName", "", 0);

  m = peer_wait (observer, is_owner_change_or_signal, "AfterName");
  g_assert_true (is_owner_change (m, NULL));
  dbus_message_unref (m);
  m = peer_wait (observer, is_owner_change_or_signal, "AfterName");
  g_assert_true (is_signal_named (m, "AfterName"));
  dbus_message_unref (m);

  peer_free (observer);
  peer_free (owner);
}

/* ---- a member whose socket is full ------------------------------------------ */

#define FULL_FILLER_SIGNALS 150
/* Together more than the send buffer of the daemon's end (208 KiB by
 * default): the daemon's writes to the member find it full */
#define FULL_FILLER_SIZE 2048

static gboolean
is_owner_change_or_test_signal (DBusMessage *m, gconstpointer data)
{
  return is_owner_change (m, NULL) ||
      dbus_message_is_signal (m, TEST_IFACE, "Tick") ||
      dbus_message_is_signal (m, TEST_IFACE, "AfterName");
}

/* What the daemon writes to a member that stopped reading waits in the
 * daemon once the member's socket is full; what the group carries to it
 * afterwards must not overtake that.  A classic client's signals, the
 * NameOwnerChanged of a member taking a name, and that member's first
 * signal reach the stalled member in that order, as stock sends them:
 * the kernel diverts the member from the daemon's first write that finds
 * no room (MulticastDiverted), so the new owner's signal goes through the
 * daemon, behind what it holds. */
static void
test_full_member_order (gconstpointer data)
{
  const gchar *name = "org.dbusmcast.BusTest.FullMember";
  Peer *filler = peer_new (PEER_CLASSIC);
  Peer *owner = peer_new (PEER_MEMBER);
  Peer *stalled = peer_new (PEER_MEMBER);
  gchar *payload = g_strnfill (FULL_FILLER_SIZE, 'f');
  gboolean diverts = kernel_has_mcast ();
  guint64 diverted = 0;
  DBusMessage *m;
  guint i;

  watch_owner (stalled, name);
  peer_add_match (stalled, "type='signal',interface='" TEST_IFACE "'");
  if (diverts)
    diverted = get_stat (owner, "MulticastDiverted");

  for (i = 0; i < FULL_FILLER_SIGNALS; i++)
    {
      emit (filler, "Tick", payload, i);
    }
  /* The daemon has handled them all: stock has queued them to the member */
  dbus_message_unref (driver_call (filler, DBUS_INTERFACE_DBUS, "GetId",
                                   DBUS_TYPE_INVALID));
  g_assert_cmpuint (request_or_release (owner, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  emit (owner, "AfterName", "", 0);
  if (diverts)
    wait_for_stat_above (owner, "MulticastDiverted", diverted);

  for (i = 0; i < FULL_FILLER_SIGNALS; i++)
    {
      m = peer_wait (stalled, is_owner_change_or_test_signal, NULL);
      if (!dbus_message_is_signal (m, TEST_IFACE, "Tick"))
        g_error ("%s reached the stalled member before signal %u of %u",
                 dbus_message_get_member (m), i, FULL_FILLER_SIGNALS);
      g_assert_cmpuint (signal_seq (m), ==, i);
      dbus_message_unref (m);
    }
  m = peer_wait (stalled, is_owner_change_or_test_signal, NULL);
  g_assert_true (is_owner_change (m, NULL));
  dbus_message_unref (m);
  m = peer_wait (stalled, is_owner_change_or_test_signal, NULL);
  g_assert_true (is_signal_named (m, "AfterName"));
  g_assert_cmpstr (dbus_message_get_sender (m), ==, owner->name);
  dbus_message_unref (m);

  g_free (payload);
  peer_free (stalled);
  peer_free (owner);
  peer_free (filler);
}

/* How many signals the emitter of /order/causal sends ahead of the one
 * that makes another member answer, and how long each is: enough that
 * the daemon is still working through them when the answer comes */
#define CAUSAL_BACKLOG 200
#define CAUSAL_SIZE 2048

static gboolean
is_causal_signal (DBusMessage *m, gconstpointer data)
{
  return dbus_message_is_signal (m, TEST_IFACE, "Tick") ||
      dbus_message_is_signal (m, TEST_IFACE, "Trigger") ||
      dbus_message_is_signal (m, TEST_IFACE, "Answer");
}

/* Checks that @p got the emitter's signals of /order/causal in order, then
 * the trigger, then @answerer's answer */
static void
assert_causal_order (Peer *p,
                     Peer *answerer)
{
  DBusMessage *m;
  guint i;

  for (i = 0; i < CAUSAL_BACKLOG; i++)
    {
      m = peer_wait (p, is_causal_signal, NULL);
      if (!dbus_message_is_signal (m, TEST_IFACE, "Tick"))
        g_error ("%s reached %s before signal %u of %u",
                 dbus_message_get_member (m), p->name, i, CAUSAL_BACKLOG);
      g_assert_cmpuint (signal_seq (m), ==, i);
      dbus_message_unref (m);
    }
  m = peer_wait (p, is_causal_signal, NULL);
  g_assert_true (is_signal_named (m, "Trigger"));
  dbus_message_unref (m);
  m = peer_wait (p, is_causal_signal, NULL);
  g_assert_true (is_signal_named (m, "Answer"));
  g_assert_cmpstr (dbus_message_get_sender (m), ==, answerer->name);
  dbus_message_unref (m);
}

/* A member's signal that a classic client and another member both want,
 * and the other member's answer to it, reach the classic client in that
 * order: stock reads the first before anyone can see it, so it handles
 * the answer after it.  The emitter sends a backlog first, so that the
 * daemon has not read the first signal yet when the answer comes.
 * "monitored": a libdbus classic client watches while a classic monitor
 * is connected, which makes the daemon read the group while its
 * transactions go out, and sees the same order. */
static void
test_causal_order (gconstpointer data)
{
  gboolean monitored = g_str_equal (data, "monitored");
  Peer *monitor = monitored ? peer_new (PEER_CLASSIC) : NULL;
  Peer *emitter = peer_new (PEER_MEMBER);
  Peer *answerer = peer_new (PEER_MEMBER);
  Peer *watcher = peer_new (monitored ? PEER_CLASSIC : peer_kind_from_string (data));
  gchar *payload = g_strnfill (CAUSAL_SIZE, 'c');
  guint64 copies = 0;
  DBusMessage *m;
  guint i;

  if (monitor != NULL)
    become_monitor (monitor);
  peer_add_match (watcher, "type='signal',interface='" TEST_IFACE "'");
  peer_add_match (answerer, "type='signal',interface='" TEST_IFACE "',member='Trigger'");
  if (kernel_has_mcast ())
    copies = get_stat (emitter, "MulticastCopiesDispatched");

  for (i = 0; i < CAUSAL_BACKLOG; i++)
    {
      emit (emitter, "Tick", payload, i);
    }
  emit (emitter, "Trigger", "", 0);

  m = peer_wait (answerer, is_signal_named, "Trigger");
  dbus_message_unref (m);
  emit (answerer, "Answer", "", 0);

  assert_causal_order (watcher, answerer);
  if (monitor != NULL)
    {
      assert_causal_order (monitor, answerer);
      peer_free (monitor);
    }

  /* The members' signals went through the group: the daemon got copies */
  if (kernel_has_mcast ())
    g_assert_cmpuint (get_stat (emitter, "MulticastCopiesDispatched"), >=,
                      copies + CAUSAL_BACKLOG + 2);

  g_free (payload);
  peer_free (watcher);
  peer_free (answerer);
  peer_free (emitter);
}

/* How many members watch the name in /order/one-step, and how often the
 * name is taken */
#define ONE_STEP_WATCHERS 50
#define ONE_STEP_ROUNDS 10

/* A transaction's messages reach several members as one step, as stock
 * writes them all before it reads anything: a member that takes a name
 * and signals as soon as it has read the RequestName reply never reaches
 * a member that watches the name before the name's NameOwnerChanged
 * does.  The daemon writes the new owner its reply first, then the
 * signal to the watchers one after the other; it holds the group's sends
 * meanwhile (MulticastGroupHolds), which keeps the new owner's signal
 * back until all have theirs.  Under TCG the daemon's writes outran the
 * new owner's wake-up in every run without the hold, so the order check
 * alone rarely fails there; the count shows the hold was taken. */
static void
test_one_step (gconstpointer data)
{
  const gchar *name = "org.dbusmcast.BusTest.OneStep";
  Peer *owner = peer_new (PEER_MEMBER);
  Peer *watchers[ONE_STEP_WATCHERS];
  guint64 holds = 0;
  DBusMessage *m;
  guint i, round;

  for (i = 0; i < ONE_STEP_WATCHERS; i++)
    {
      watchers[i] = peer_new (PEER_MEMBER);
      watch_owner (watchers[i], name);
      peer_add_match (watchers[i], "type='signal',interface='" TEST_IFACE "',member='Taken'");
    }
  if (kernel_has_mcast ())
    holds = get_stat (owner, "MulticastGroupHolds");

  for (round = 0; round < ONE_STEP_ROUNDS; round++)
    {
      g_assert_cmpuint (request_or_release (owner, "RequestName", name), ==,
                        DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
      emit (owner, "Taken", "", round);

      for (i = 0; i < ONE_STEP_WATCHERS; i++)
        {
          m = peer_wait (watchers[i], is_owner_change_or_signal, "Taken");
          if (!is_owner_change (m, NULL))
            g_error ("round %u: watcher %u got the new owner's signal before "
                     "NameOwnerChanged", round, i);
          dbus_message_unref (m);
          m = peer_wait (watchers[i], is_owner_change_or_signal, "Taken");
          g_assert_true (is_signal_named (m, "Taken"));
          g_assert_cmpuint (signal_seq (m), ==, round);
          dbus_message_unref (m);
        }

      g_assert_cmpuint (request_or_release (owner, "ReleaseName", name), ==,
                        DBUS_RELEASE_NAME_REPLY_RELEASED);
      for (i = 0; i < ONE_STEP_WATCHERS; i++)
        expect_owner_change (watchers[i], name, owner->name, "");
    }

  /* The daemon held the group for each of those transactions */
  if (kernel_has_mcast ())
    g_assert_cmpuint (get_stat (owner, "MulticastGroupHolds"), >=,
                      holds + 2 * ONE_STEP_ROUNDS);

  for (i = 0; i < ONE_STEP_WATCHERS; i++)
    peer_free (watchers[i]);
  peer_free (owner);
}

/* ---- a callee that leaves without replying --------------------------------- */

static gboolean
is_owner_change_or_reply (DBusMessage *m, gconstpointer data)
{
  return is_owner_change (m, NULL) || dbus_message_get_reply_serial (m) != 0;
}

static gboolean
is_no_reply (DBusMessage *m, gconstpointer data)
{
  return dbus_message_is_error (m, DBUS_ERROR_NO_REPLY);
}

/* The error stock dbus-daemon sends a caller whose callee disconnected
 * without replying to its call serial */
static void
assert_no_reply (DBusMessage   *m,
                 dbus_uint32_t  serial)
{
  const char *text = NULL;

  g_assert_cmpstr (dbus_message_type_to_string (dbus_message_get_type (m)), ==, "error");
  g_assert_cmpuint (dbus_message_get_reply_serial (m), ==, serial);
  g_assert_cmpstr (dbus_message_get_error_name (m), ==, DBUS_ERROR_NO_REPLY);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, DBUS_SERVICE_DBUS);
  g_assert_true (dbus_message_get_args (m, NULL, DBUS_TYPE_STRING, &text, DBUS_TYPE_INVALID));
  g_assert_cmpstr (text, ==, "Message recipient disconnected from message bus without replying");
}

/* A callee that received two calls, to its unique name and to a
 * well-known name it owns, and disconnects without answering: the caller
 * gets stock's NoReply error for each at once, after the
 * NameOwnerChanged of the name, the newest call first as stock sends
 * them.  Between members neither call
 * passes the daemon. */
static void
no_reply_case (gconstpointer data,
               gboolean      monitored)
{
  const gchar *name = "org.dbusmcast.BusTest.Leaving";
  PeerKind kinds[2];
  Peer *caller, *callee, *monitor = NULL;
  gboolean fast;
  guint64 dispatched = 0;
  dbus_uint32_t serials[2];
  DBusMessage *m;
  guint i;

  g_assert_cmpuint (parse_kinds (data, kinds, 2), ==, 2);
  if (monitored)
    {
      monitor = peer_new (PEER_CLASSIC);
      become_monitor (monitor);
    }
  caller = peer_new (kinds[0]);
  callee = peer_new (kinds[1]);
  fast = kinds[0] == PEER_MEMBER && kinds[1] == PEER_MEMBER && kernel_has_mcast ();
  watch_owner (caller, name);
  g_assert_cmpuint (request_or_release (callee, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  expect_owner_change (caller, name, "", callee->name);
  if (fast)
    dispatched = get_stat (caller, "MessagesDispatched");

  for (i = 0; i < 2; i++)
    {
      m = new_call (i == 0 ? callee->name : name, "Hang", NULL);
      serials[i] = peer_send (caller, m);
      dbus_message_unref (m);
      dbus_message_unref (peer_wait (callee, is_test_call, NULL));
    }
  peer_free (callee);

  m = peer_wait (caller, is_owner_change_or_reply, NULL);
  g_assert_true (is_owner_change (m, NULL));
  dbus_message_unref (m);
  for (i = 0; i < 2; i++)
    {
      m = peer_wait (caller, is_owner_change_or_reply, NULL);
      assert_no_reply (m, serials[1 - i]);
      dbus_message_unref (m);
    }

  if (fast)
    assert_nothing_dispatched (caller, dispatched);

  /* one error each */
  peer_sync (caller);
  while ((m = peer_pop (caller, 0)) != NULL)
    {
      g_assert_cmpuint (dbus_message_get_reply_serial (m), !=, serials[0]);
      g_assert_cmpuint (dbus_message_get_reply_serial (m), !=, serials[1]);
      dbus_message_unref (m);
    }

  /* The monitor sees the calls, then the errors, newest first, from the
   * daemon to the caller, as stock shows them */
  if (monitor != NULL)
    {
      for (i = 0; i < 2; i++)
        {
          m = peer_wait (monitor, is_test_call, NULL);
          g_assert_cmpuint (dbus_message_get_serial (m), ==, serials[i]);
          dbus_message_unref (m);
        }
      for (i = 0; i < 2; i++)
        {
          m = peer_wait (monitor, is_no_reply, NULL);
          assert_no_reply (m, serials[1 - i]);
          g_assert_cmpstr (dbus_message_get_destination (m), ==, caller->name);
          dbus_message_unref (m);
        }
    }
  peer_free (caller);
  if (monitor != NULL)
    peer_free (monitor);
}

static void
test_no_reply (gconstpointer data)
{
  no_reply_case (data, FALSE);
}

/* The same with a classic monitor, which sees the calls and stock's
 * NoReply errors to them (the daemon's own member of the group read the
 * calls), while the caller still gets one error per call */
static void
test_no_reply_monitored (gconstpointer data)
{
  no_reply_case (data, TRUE);
}

/* What monitor sees before a signal caller sends now, after a round trip
 * (so the daemon has done all it was doing): oldest first */
static GList *
monitor_until_after (Peer *monitor,
                     Peer *caller)
{
  GList *seen = NULL;
  DBusMessage *m;

  peer_sync (caller);
  m = new_signal (TEST_PATH, TEST_IFACE, "After", "", 0);
  peer_send (caller, m);
  dbus_message_unref (m);
  while ((m = peer_pop (monitor, TIMEOUT_US / 1000)) != NULL &&
         !dbus_message_is_signal (m, TEST_IFACE, "After"))
    seen = g_list_prepend (seen, m);
  g_assert_nonnull (m);
  dbus_message_unref (m);
  return g_list_reverse (seen);
}

/* A monitor that connects after calls between members were made sees
 * stock's NoReply error for each its callee leaves unanswered, newest
 * first, and none for a call the callee answered, whether the caller
 * read the answer before the monitor came or not ("unread": a caller
 * that does not read, as one stopped in a debugger).  The members list
 * their calls and replies for the daemon (dbus/dbus-mcast-calls.h); the
 * calls pass the kernel alone. */
static void
test_no_reply_monitor_later (gconstpointer data)
{
  const gchar *name = "org.dbusmcast.BusTest.LeavingLater";
  gboolean unread = g_str_equal (data, "unread");
  Peer *caller = peer_new (PEER_MEMBER);
  Peer *callee = peer_new (PEER_MEMBER);
  Peer *monitor = peer_new (PEER_CLASSIC);
  gboolean fast = kernel_has_mcast ();
  guint64 dispatched = 0;
  dbus_uint32_t serials[3];
  DBusMessage *m, *call;
  GList *seen, *l;
  guint i;

  g_assert_cmpuint (request_or_release (callee, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  peer_sync (caller);
  if (fast)
    dispatched = get_stat (caller, "MessagesDispatched");

  /* Two calls wait; the third is answered */
  for (i = 0; i < 3; i++)
    {
      m = new_call (i == 1 ? name : callee->name, "Hang", NULL);
      serials[i] = peer_send (caller, m);
      dbus_message_unref (m);
      call = peer_wait (callee, is_test_call, NULL);
      if (i == 2)
        {
          m = dbus_message_new_method_return (call);
          peer_send (callee, m);
          dbus_message_unref (m);
        }
      dbus_message_unref (call);
    }
  if (fast)
    assert_nothing_dispatched (caller, dispatched);
  if (!unread)
    {
      m = peer_wait (caller, is_reply_to, GUINT_TO_POINTER (serials[2]));
      g_assert_cmpint (dbus_message_get_type (m), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
      dbus_message_unref (m);
    }

  become_monitor (monitor);
  peer_free (callee);

  for (i = 0; i < 2; i++)
    {
      m = peer_wait (monitor, is_no_reply, NULL);
      assert_no_reply (m, serials[1 - i]);
      g_assert_cmpstr (dbus_message_get_destination (m), ==, caller->name);
      dbus_message_unref (m);
    }
  /* Nothing for the answered call: the monitor saw all the departure
   * brought once it sees a message the daemon sends after it */
  seen = monitor_until_after (monitor, caller);
  for (l = seen; l != NULL; l = l->next)
    g_assert_false (is_no_reply (l->data, NULL));
  g_list_free_full (seen, (GDestroyNotify) dbus_message_unref);

  /* The caller gets the answer it had not read and its own errors */
  if (unread)
    {
      m = peer_wait (caller, is_reply_to, GUINT_TO_POINTER (serials[2]));
      g_assert_cmpint (dbus_message_get_type (m), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
      dbus_message_unref (m);
    }
  for (i = 0; i < 2; i++)
    {
      m = peer_wait (caller, is_reply_to, GUINT_TO_POINTER (serials[i]));
      assert_no_reply (m, serials[i]);
      dbus_message_unref (m);
    }

  peer_free (monitor);
  peer_free (caller);
}

/* caller's call to name, which callee receives (into *received if not
 * NULL); between members, checked to pass the kernel alone.  Returns its
 * serial. */
static dbus_uint32_t
send_hang (Peer         *caller,
           Peer         *callee,
           const gchar  *name,
           gboolean      fast,
           DBusMessage **received)
{
  guint64 dispatched = 0;
  dbus_uint32_t serial;
  DBusMessage *m;

  if (fast)
    dispatched = get_stat (caller, "MessagesDispatched");
  m = new_call (name, "Hang", NULL);
  serial = peer_send (caller, m);
  dbus_message_unref (m);
  m = peer_wait (callee, is_test_call, NULL);
  if (fast)
    assert_nothing_dispatched (caller, dispatched);
  if (received != NULL)
    *received = m;
  else
    dbus_message_unref (m);
  return serial;
}

/* A call to a well-known name went to whoever owned the name when it was
 * sent, wherever the name goes while the call is unanswered: the caller
 * gets NoReply when that callee leaves, not when a later owner does, and
 * the callee's late reply still arrives.  Data: caller-first-second. */
static void
test_no_reply_name_moved (gconstpointer data)
{
  const gchar *name = "org.dbusmcast.BusTest.Moving";
  PeerKind kinds[3];
  Peer *caller, *first, *second;
  DBusMessage *m, *call, *reply;
  dbus_uint32_t serials[3];
  gchar *second_name;
  gboolean fast;

  g_assert_cmpuint (parse_kinds (data, kinds, 3), ==, 3);
  caller = peer_new (kinds[0]);
  first = peer_new (kinds[1]);
  second = peer_new (kinds[2]);
  fast = kinds[0] == PEER_MEMBER && kinds[1] == PEER_MEMBER &&
      kinds[2] == PEER_MEMBER && kernel_has_mcast ();
  watch_owner (caller, name);
  g_assert_cmpuint (request_or_release (first, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  g_assert_cmpuint (request_or_release (second, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_IN_QUEUE);
  expect_owner_change (caller, name, "", first->name);

  /* The first owner gets a call, then the name moves to the second,
   * which gets a call and leaves */
  serials[0] = send_hang (caller, first, name, fast, &call);
  g_assert_cmpuint (request_or_release (first, "ReleaseName", name), ==,
                    DBUS_RELEASE_NAME_REPLY_RELEASED);
  expect_owner_change (caller, name, first->name, second->name);
  serials[1] = send_hang (caller, second, name, fast, NULL);
  second_name = g_strdup (second->name);
  peer_free (second);

  expect_owner_change (caller, name, second_name, "");
  g_free (second_name);
  m = peer_wait (caller, is_owner_change_or_reply, NULL);
  assert_no_reply (m, serials[1]);
  dbus_message_unref (m);
  peer_sync (caller);
  while ((m = peer_pop (caller, 0)) != NULL)
    {
      g_assert_cmpuint (dbus_message_get_reply_serial (m), !=, serials[0]);
      dbus_message_unref (m);
    }

  /* The first owner answers at last */
  reply = dbus_message_new_method_return (call);
  peer_send (first, reply);
  dbus_message_unref (reply);
  dbus_message_unref (call);
  m = peer_wait (caller, is_owner_change_or_reply, NULL);
  g_assert_cmpint (dbus_message_get_type (m), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  g_assert_cmpuint (dbus_message_get_reply_serial (m), ==, serials[0]);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, first->name);
  dbus_message_unref (m);

  /* It takes the name again, gets a call, lets the name go and leaves
   * without answering: NoReply at once, although the name is nobody's */
  g_assert_cmpuint (request_or_release (first, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  expect_owner_change (caller, name, "", first->name);
  serials[2] = send_hang (caller, first, name, fast, NULL);
  g_assert_cmpuint (request_or_release (first, "ReleaseName", name), ==,
                    DBUS_RELEASE_NAME_REPLY_RELEASED);
  expect_owner_change (caller, name, first->name, "");
  peer_free (first);
  m = peer_wait (caller, is_owner_change_or_reply, NULL);
  assert_no_reply (m, serials[2]);
  dbus_message_unref (m);

  /* one answer each */
  peer_sync (caller);
  while ((m = peer_pop (caller, 0)) != NULL)
    {
      g_assert_cmpuint (dbus_message_get_reply_serial (m), ==, 0);
      dbus_message_unref (m);
    }
  peer_free (caller);
}

/* At most this many calls, until the name's new owner got that many */
#define RACING_CALLS_MAX 2000
#define RACING_CALLS_AFTER 10

/* Adds the serials of the test calls callee received so far to serials,
 * and counts them in *received */
static void
collect_calls (Peer       *callee,
               GHashTable *serials,
               guint      *received,
               int         timeout_ms)
{
  DBusMessage *m;

  while ((m = peer_pop (callee, timeout_ms)) != NULL)
    {
      if (is_test_call (m, NULL))
        {
          g_hash_table_add (serials, GUINT_TO_POINTER (dbus_message_get_serial (m)));
          *received += 1;
        }
      dbus_message_unref (m);
    }
}

/* Reads what monitor shows up to the NoReply errors for the calls
 * expected (reply serials): each must come after the departure of the
 * member named departed and before any other departure. */
static void
expect_monitored_no_replies (Peer        *monitor,
                             const gchar *departed,
                             GHashTable  *expected)
{
  gboolean after = FALSE;
  guint seen = 0;

  while (seen < g_hash_table_size (expected))
    {
      DBusMessage *m = peer_wait (monitor, is_owner_change_or_reply, NULL);
      const char *n = NULL, *o = NULL, *nw = NULL;

      if (is_owner_change (m, NULL) &&
          dbus_message_get_args (m, NULL, DBUS_TYPE_STRING, &n, DBUS_TYPE_STRING, &o,
                                 DBUS_TYPE_STRING, &nw, DBUS_TYPE_INVALID) &&
          n[0] == ':' && nw[0] == '\0')
        after = strcmp (n, departed) == 0;
      else if (is_no_reply (m, NULL))
        {
          /* Not before the callee's departure, and only its calls */
          g_assert_true (after);
          g_assert_true (g_hash_table_contains (expected,
              GUINT_TO_POINTER (dbus_message_get_reply_serial (m))));
          seen += 1;
        }
      dbus_message_unref (m);
    }
}

/* Calls to a well-known name race with the name's move from one member
 * to another: the caller sends them while the daemon handles the first
 * owner's ReleaseName, so that some are filtered between the daemon's
 * reading the ReleaseName and its installing the new filters.  A monitor
 * the daemon serves must see the NoReply of each call when the member
 * that got it leaves, as stock shows it and as the caller gets it, not
 * when the name's other owner does. */
static void
test_no_reply_name_moved_monitored (gconstpointer data)
{
  const gchar *name = "org.dbusmcast.BusTest.Racing";
  Peer *monitor, *caller, *callee[2];
  GHashTable *serials[2];
  gchar *names[2];
  guint64 dispatched = 0;
  guint sent, received = 0, errors, i;
  gboolean fast = kernel_has_mcast ();
  DBusMessage *m;

  monitor = peer_new (PEER_CLASSIC);
  become_monitor (monitor);
  caller = peer_new (PEER_MEMBER);
  for (i = 0; i < 2; i++)
    {
      callee[i] = peer_new (PEER_MEMBER);
      names[i] = g_strdup (callee[i]->name);
      serials[i] = g_hash_table_new (NULL, NULL);
    }
  g_assert_cmpuint (request_or_release (callee[0], "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  g_assert_cmpuint (request_or_release (callee[1], "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_IN_QUEUE);
  if (fast)
    dispatched = get_stat (caller, "MessagesDispatched");

  /* The first call surely reaches the first owner; the caller goes on
   * until the second has some */
  for (sent = 0; sent < RACING_CALLS_MAX &&
       g_hash_table_size (serials[1]) < RACING_CALLS_AFTER; sent++)
    {
      if (sent == 1)
        name_call_async (callee[0], "ReleaseName", name);
      m = new_call (name, "Hang", NULL);
      peer_send (caller, m);
      dbus_message_unref (m);
      for (i = 0; i < 2; i++)
        collect_calls (callee[i], serials[i], &received, 0);
    }
  while (received < sent)
    for (i = 0; i < 2; i++)
      collect_calls (callee[i], serials[i], &received, 10);
  g_assert_cmpuint (g_hash_table_size (serials[0]), >, 0);
  g_assert_cmpuint (g_hash_table_size (serials[1]), >, 0);
  if (fast)
    assert_nothing_dispatched (caller, dispatched);

  /* Each owner leaves in turn: the caller gets the NoReply errors of the
   * calls that one got */
  for (i = 0; i < 2; i++)
    {
      peer_free (callee[i]);
      for (errors = 0; errors < g_hash_table_size (serials[i]); errors++)
        {
          m = peer_wait (caller, is_no_reply, NULL);
          g_assert_true (g_hash_table_contains (serials[i],
              GUINT_TO_POINTER (dbus_message_get_reply_serial (m))));
          dbus_message_unref (m);
        }
    }

  /* And the monitor sees them as stock shows them */
  for (i = 0; i < 2; i++)
    {
      expect_monitored_no_replies (monitor, names[i], serials[i]);
      g_hash_table_unref (serials[i]);
      g_free (names[i]);
    }
  peer_free (caller);
  peer_free (monitor);
}

/* ---- byte order ----------------------------------------------------------- */

/* m marshalled in the other byte order than this machine's, as a client
 * of another architecture (or one forwarding its messages) sends it, with
 * serial, which the sending connection keeps: one it never uses itself */
static DBusMessage *
swapped (DBusMessage   *m,
         dbus_uint32_t  serial)
{
  GDBusMessageByteOrder order = G_BYTE_ORDER == G_LITTLE_ENDIAN ?
      G_DBUS_MESSAGE_BYTE_ORDER_BIG_ENDIAN : G_DBUS_MESSAGE_BYTE_ORDER_LITTLE_ENDIAN;
  GDBusMessage *gm = gdbus_message_of (m, serial);
  DBusMessage *out;
  char *bytes = NULL;
  int len = 0;

  g_dbus_message_set_byte_order (gm, order);
  out = libdbus_message_of (gm);
  g_object_unref (gm);
  g_assert_true (dbus_message_marshal (out, &bytes, &len));
  g_assert_cmpint (bytes[0], ==, order);
  dbus_free (bytes);
  return out;
}

/* Messages in the other byte order reach their recipients as stock
 * delivers them: a broadcast signal a rule matches, and a signal to the
 * receiver's unique name */
static void
test_byte_order (gconstpointer data)
{
  PeerKind kinds[2];
  Peer *sender, *receiver;
  DBusMessage *m, *s;
  guint i;

  g_assert_cmpuint (parse_kinds (data, kinds, 2), ==, 2);
  sender = peer_new (kinds[0]);
  receiver = peer_new (kinds[1]);
  peer_add_match (receiver, "type='signal',interface='" TEST_IFACE "',member='Swapped'");

  for (i = 0; i < 2; i++)
    {
      m = new_signal (TEST_PATH, TEST_IFACE, i == 0 ? "Swapped" : "SwappedToYou",
                      "other byte order", i);
      if (i == 1)
        g_assert_true (dbus_message_set_destination (m, receiver->name));
      s = swapped (m, 0x70000000 + i);
      dbus_message_unref (m);
      peer_send (sender, s);
      dbus_message_unref (s);
    }

  m = peer_wait (receiver, is_signal_named, "Swapped");
  g_assert_cmpstr (dbus_message_get_sender (m), ==, sender->name);
  g_assert_cmpuint (signal_seq (m), ==, 0);
  dbus_message_unref (m);
  m = peer_wait (receiver, is_signal_named, "SwappedToYou");
  g_assert_cmpstr (dbus_message_get_sender (m), ==, sender->name);
  g_assert_cmpstr (dbus_message_get_destination (m), ==, receiver->name);
  g_assert_cmpuint (signal_seq (m), ==, 1);
  dbus_message_unref (m);

  peer_free (receiver);
  peer_free (sender);
}

/* An application may set its messages' serials itself, and send two with
 * the same: stock delivers both, as it does any message */
static void
test_reused_serial (gconstpointer data)
{
  PeerKind kinds[2];
  Peer *sender, *receiver;
  DBusMessage *m;
  guint i;

  g_assert_cmpuint (parse_kinds (data, kinds, 2), ==, 2);
  sender = peer_new (kinds[0]);
  receiver = peer_new (kinds[1]);
  peer_add_match (receiver, "type='signal',interface='" TEST_IFACE "',member='Reused'");

  for (i = 0; i < 2; i++)
    {
      m = new_signal (TEST_PATH, TEST_IFACE, "Reused", "same serial", i);
      dbus_message_set_serial (m, 0x71000000);
      g_assert_cmpuint (peer_send (sender, m), ==, 0x71000000);
      dbus_message_unref (m);
    }

  for (i = 0; i < 2; i++)
    {
      m = peer_wait (receiver, is_signal_named, "Reused");
      g_assert_cmpstr (dbus_message_get_sender (m), ==, sender->name);
      g_assert_cmpuint (signal_seq (m), ==, i);
      dbus_message_unref (m);
    }

  peer_free (receiver);
  peer_free (sender);
}

/* ---- security: well-behaved clients --------------------------------------- */

/* A third client never sees a unicast between two others */
static void
test_unicast_privacy (gconstpointer data)
{
  PeerKind kinds[3];
  Peer *a, *b, *c;
  DBusMessage *m;

  g_assert_cmpuint (parse_kinds (data, kinds, 3), ==, 3);
  a = peer_new (kinds[0]);
  b = peer_new (kinds[1]);
  c = peer_new (kinds[2]);
  /* c's broad rule must not make it an eavesdropper */
  peer_add_match (c, "type='signal'");
  peer_add_match (c, "interface='" TEST_IFACE "'");

  m = new_signal (TEST_PATH, TEST_IFACE, "Secret", "for b only", 1);
  dbus_message_set_destination (m, b->name);
  peer_send (a, m);
  dbus_message_unref (m);
  m = peer_wait (b, is_signal_named, "Secret");
  dbus_message_unref (m);
  echo_roundtrip (a, b, "secret call");
  assert_nothing_before_fence (a, c);
  peer_free (a);
  peer_free (b);
  peer_free (c);
}

/* ---- security: a hand-made member ---------------------------------------- */

typedef struct
{
  int fd;
  gchar *name;
  gboolean promoted;            /* the daemon agreed to NEGOTIATE_MULTICAST */
  dbus_uint32_t serial;
} Raw;

static void
raw_send_bytes (Raw        *r,
                const void *data,
                gsize       len)
{
  g_assert_cmpint (send (r->fd, data, len, MSG_NOSIGNAL), ==, (gssize) len);
}

/* The most unix fds the daemon sends the raw client in one packet */
#define RAW_MAX_FDS 4

/* One packet and the unix fds that came with it (into fds, at most
 * RAW_MAX_FDS, which may be NULL to close them), or NULL if none came
 * within timeout_ms; 0-length at EOF */
static GBytes *
raw_recv_packet_fds (Raw   *r,
                     int    timeout_ms,
                     int   *fds,
                     guint *n_fds)
{
  struct pollfd p = { r->fd, POLLIN, 0 };
  /* the fds, and what UNIX_PASSID brings */
  union
  {
    struct cmsghdr align;
    char buf[CMSG_SPACE (RAW_MAX_FDS * sizeof (int)) + 256];
  } control;
  struct iovec iov;
  struct msghdr msg = { 0 };
  struct cmsghdr *cm;
  gchar *buf;
  gssize n;

  if (n_fds != NULL)
    *n_fds = 0;
  if (poll (&p, 1, timeout_ms) != 1)
    return NULL;
  buf = g_malloc (DBUS_SEQPACKET_FRAGMENT_SIZE);
  iov.iov_base = buf;
  iov.iov_len = DBUS_SEQPACKET_FRAGMENT_SIZE;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof (control.buf);
  n = recvmsg (r->fd, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0 && errno == ECONNRESET)
    n = 0;
  g_assert_cmpint (n, >=, 0);
  g_assert_false (msg.msg_flags & MSG_CTRUNC);

  for (cm = CMSG_FIRSTHDR (&msg); n > 0 && cm != NULL; cm = CMSG_NXTHDR (&msg, cm))
    {
      const int *received = (const int *) CMSG_DATA (cm);
      guint i, count;

      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
        continue;
      count = (cm->cmsg_len - CMSG_LEN (0)) / sizeof (int);
      for (i = 0; i < count; i++)
        {
          if (fds != NULL)
            fds[(*n_fds)++] = received[i];
          else
            close (received[i]);
        }
    }
  return g_bytes_new_take (buf, n);
}

static GBytes *
raw_recv_packet (Raw *r,
                 int  timeout_ms)
{
  return raw_recv_packet_fds (r, timeout_ms, NULL, NULL);
}

/* The message in data with the unix fds it came with */
static DBusMessage *
demarshal_with_fds (const char *data,
                    gsize       len,
                    const int  *fds,
                    guint       n_fds)
{
  DBusMessageLoader *loader = _dbus_message_loader_new ();
  DBusString *buffer;
  unsigned int room;
  DBusMessage *m;
  int *unix_fds;

  g_assert_nonnull (loader);
  _dbus_message_loader_get_buffer (loader, &buffer, NULL, NULL);
  g_assert_true (_dbus_string_append_len (buffer, data, len));
  _dbus_message_loader_return_buffer (loader, buffer);
  g_assert_true (_dbus_message_loader_get_unix_fds (loader, &unix_fds, &room));
  g_assert_cmpuint (n_fds, <=, room);
  memcpy (unix_fds, fds, n_fds * sizeof (int));
  _dbus_message_loader_return_unix_fds (loader, unix_fds, n_fds);
  g_assert_true (_dbus_message_loader_queue_messages (loader));
  m = _dbus_message_loader_pop_message (loader);
  g_assert_nonnull (m);
  _dbus_message_loader_unref (loader);
  return m;
}

/* A SASL line from the daemon */
static gchar *
raw_auth_line (Raw *r)
{
  GBytes *b = raw_recv_packet (r, 10000);
  gsize n;
  const gchar *data;

  g_assert_nonnull (b);
  data = g_bytes_get_data (b, &n);
  g_assert_cmpuint (n, >, 0);
  {
    gchar *line = g_strndup (data, n);

    g_bytes_unref (b);
    return line;
  }
}

/* The next message to the raw client, or NULL if none within timeout_ms */
static DBusMessage *
raw_recv (Raw *r,
          int  timeout_ms)
{
  DBusError error = DBUS_ERROR_INIT;
  int fds[RAW_MAX_FDS];
  const char *data;
  DBusMessage *m;
  guint n_fds;
  GBytes *b;
  gsize n;

  b = raw_recv_packet_fds (r, timeout_ms, fds, &n_fds);
  if (b == NULL)
    return NULL;
  data = g_bytes_get_data (b, &n);
  g_assert_cmpuint (n, >, 0);
  g_assert_cmpint (dbus_message_demarshal_bytes_needed (data, n), ==, (int) n);
  if (n_fds > 0)
    {
      m = demarshal_with_fds (data, n, fds, n_fds);
    }
  else
    {
      m = dbus_message_demarshal (data, n, &error);
      test_assert_no_error (&error);
    }
  g_bytes_unref (b);
  return m;
}

/* Marshals m as the raw client with the given SENDER (its own name if
 * NULL) and the next serial */
static gchar *
raw_marshal (Raw         *r,
             DBusMessage *m,
             const gchar *sender,
             int         *len)
{
  char *bytes = NULL;
  gchar *copy;

  dbus_message_set_serial (m, ++r->serial);
  if (sender != NULL || r->name != NULL)
    g_assert_true (dbus_message_set_sender (m, sender != NULL ? sender : r->name));
  g_assert_true (dbus_message_marshal (m, &bytes, len));
  copy = g_memdup2 (bytes, *len);
  dbus_free (bytes);
  return copy;
}

static dbus_uint32_t
raw_send (Raw         *r,
          DBusMessage *m,
          const gchar *sender)
{
  int len;
  gchar *bytes = raw_marshal (r, m, sender, &len);

  raw_send_bytes (r, bytes, len);
  g_free (bytes);
  return r->serial;
}

static DBusMessage *
raw_wait (Raw              *r,
          MessagePredicate  pred,
          gconstpointer     data)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;

  while (g_get_monotonic_time () < deadline)
    {
      DBusMessage *m = raw_recv (r, 100);

      if (m == NULL)
        continue;
      if (pred (m, data))
        return m;
      dbus_message_unref (m);
    }
  g_error ("the raw client timed out waiting for a message");
}

/* Connects to the unixseq: entry of address and does what libdbus does
 * up to Hello: the credentials byte, AUTH EXTERNAL, NEGOTIATE_UNIX_FD,
 * NEGOTIATE_MULTICAST, BEGIN, UNIX_PASSID if promoted */
static Raw *
raw_connect (const gchar *address)
{
  Raw *r = g_new0 (Raw, 1);
  gchar *entry = address_entry (address, "unixseq:");
  DBusAddressEntry **parsed;
  int n_parsed;
  DBusError error = DBUS_ERROR_INIT;
  struct sockaddr_un addr = { AF_UNIX, { 0 } };
  gchar *uid = g_strdup_printf ("%u", (unsigned) getuid ());
  GString *auth = g_string_new ("AUTH EXTERNAL ");
  const gchar *p;
  gchar *line;

  g_assert_true (dbus_parse_address (entry, &parsed, &n_parsed, &error));
  test_assert_no_error (&error);
  g_strlcpy (addr.sun_path, dbus_address_entry_get_value (parsed[0], "path"),
             sizeof (addr.sun_path));
  dbus_address_entries_free (parsed);
  r->fd = socket (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  g_assert_cmpint (r->fd, >=, 0);
  g_assert_cmpint (connect (r->fd, (struct sockaddr *) &addr, sizeof (addr)), ==, 0);

  for (p = uid; *p != '\0'; p++)
    g_string_append_printf (auth, "%02x", (guchar) *p);
  g_string_append (auth, "\r\n");
  raw_send_bytes (r, "", 1);
  raw_send_bytes (r, auth->str, auth->len);
  line = raw_auth_line (r);
  g_assert_true (g_str_has_prefix (line, "OK "));
  g_free (line);
  raw_send_bytes (r, "NEGOTIATE_UNIX_FD\r\n", 19);
  line = raw_auth_line (r);
  g_assert_cmpstr (line, ==, "AGREE_UNIX_FD\r\n");
  g_free (line);
  raw_send_bytes (r, "NEGOTIATE_MULTICAST\r\n", 21);
  line = raw_auth_line (r);
  r->promoted = g_str_has_prefix (line, "AGREE_MULTICAST");
  if (!r->promoted)
    g_assert_true (g_str_has_prefix (line, "ERROR"));
  g_free (line);
  raw_send_bytes (r, "BEGIN\r\n", 7);
  if (r->promoted)
    {
      int on = 1;

      g_assert_cmpint (setsockopt (r->fd, SOL_UNIX, UNIX_PASSID, &on, sizeof (on)), ==, 0);
    }

  g_string_free (auth, TRUE);
  g_free (uid);
  g_free (entry);
  return r;
}

/* Sends Hello as the raw client: the serial */
static dbus_uint32_t
raw_send_hello (Raw *r)
{
  DBusMessage *hello = dbus_message_new_method_call (DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                                                     DBUS_INTERFACE_DBUS, "Hello");

  raw_send (r, hello, NULL);
  dbus_message_unref (hello);
  return r->serial;
}

/* raw_connect() and Hello */
static Raw *
raw_new (const gchar *address)
{
  Raw *r = raw_connect (address);
  DBusMessage *reply;
  const char *name;

  reply = raw_wait (r, is_reply_to, GUINT_TO_POINTER (raw_send_hello (r)));
  g_assert_true (dbus_message_get_args (reply, NULL, DBUS_TYPE_STRING, &name,
                                        DBUS_TYPE_INVALID));
  r->name = g_strdup (name);
  dbus_message_unref (reply);
  return r;
}

static gboolean
is_calls_signal (DBusMessage *m, gconstpointer data)
{
  return dbus_message_is_signal (m, DBUS_MCAST_INTERFACE, DBUS_MCAST_CALLS);
}

/* raw_new(), keeping the fd of the table of calls the daemon hands a
 * member before its Hello reply (dbus/dbus-mcast-calls.h) */
static Raw *
raw_new_with_calls (const gchar *address,
                    int         *fd)
{
  Raw *r = raw_connect (address);
  dbus_uint32_t hello;
  const char *name;
  DBusMessage *m;

  g_assert_true (r->promoted);
  hello = raw_send_hello (r);
  m = raw_wait (r, is_calls_signal, NULL);
  g_assert_true (dbus_message_get_args (m, NULL, DBUS_TYPE_UNIX_FD, fd,
                                        DBUS_TYPE_INVALID));
  dbus_message_unref (m);
  m = raw_wait (r, is_reply_to, GUINT_TO_POINTER (hello));
  g_assert_true (dbus_message_get_args (m, NULL, DBUS_TYPE_STRING, &name,
                                        DBUS_TYPE_INVALID));
  r->name = g_strdup (name);
  dbus_message_unref (m);
  return r;
}

/* The table of calls in fd, mapped writable */
static DBusMcastCallTable *
map_calls (int fd)
{
  DBusMcastCallTable *table;

  table = mmap (NULL, sizeof (*table), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  g_assert_true (table != MAP_FAILED);
  return table;
}

/* raw_new_with_calls(), its table of calls mapped writable into *table */
static Raw *
raw_new_with_table (const gchar         *address,
                    DBusMcastCallTable **table)
{
  int fd;
  Raw *r = raw_new_with_calls (address, &fd);

  *table = map_calls (fd);
  close (fd);
  return r;
}

static void
raw_free (Raw *r)
{
  close (r->fd);
  g_free (r->name);
  g_free (r);
}

/* The raw client's own messages work: a call answered by a member */
static void
raw_roundtrip (Raw  *r,
               Peer *server)
{
  DBusMessage *call = new_call (server->name, "Echo", "raw");
  dbus_uint32_t serial = raw_send (r, call, NULL);
  DBusMessage *reply;

  dbus_message_unref (call);
  dbus_message_unref (serve_one (server));
  reply = raw_wait (r, is_reply_to, GUINT_TO_POINTER (serial));
  assert_echo (reply, "raw");
  dbus_message_unref (reply);
}

/* A hand-made client is a member on a multicast bus, like libdbus */
static void
test_raw_promotion (gconstpointer data)
{
  Raw *r = raw_new (bus_address);
  Peer *server = peer_new (PEER_MEMBER);

  g_test_message ("the raw client %s was %spromoted", r->name, r->promoted ? "" : "not ");
  g_assert_true (r->promoted == kernel_has_mcast ());
  raw_roundtrip (r, server);
  raw_free (r);
  peer_free (server);
}

static gboolean
claims_sender (DBusMessage *m, gconstpointer name)
{
  return g_strcmp0 (dbus_message_get_sender (m), name) == 0;
}

/* The raw client signs a broadcast and a unicast with the victim's unique
 * name: a receiver trusting SENDER must not see them as the victim's */
static void
test_forged_sender (gconstpointer data)
{
  Raw *r = raw_new (bus_address);
  Peer *victim = peer_new (PEER_MEMBER);
  Peer *receiver = peer_new (peer_kind_from_string (data));
  gchar *rule = g_strdup_printf ("type='signal',sender='%s',interface='" TEST_IFACE "'",
                                 victim->name);
  DBusMessage *m;

  peer_add_match (receiver, rule);
  g_free (rule);

  m = new_signal (TEST_PATH, TEST_IFACE, "Forged", "broadcast", 1);
  raw_send (r, m, victim->name);
  dbus_message_unref (m);
  m = new_signal (TEST_PATH, TEST_IFACE, "Forged", "unicast", 2);
  dbus_message_set_destination (m, receiver->name);
  raw_send (r, m, victim->name);
  dbus_message_unref (m);
  /* the raw client still gets answers: the forgeries were sent */
  raw_roundtrip (r, victim);

  emit (victim, "Genuine", "", 3);
  /* Whatever of the raw client's arrives, none claims to be the victim's
   * but the genuine signal */
  m = peer_wait (receiver, claims_sender, victim->name);
  g_assert_cmpstr (dbus_message_get_member (m), ==, "Genuine");
  dbus_message_unref (m);
  raw_free (r);
  peer_free (victim);
  peer_free (receiver);
}

/* The raw client signs a unicast with its own unique name spelt with a
 * leading zero (":1.07" for ":1.7"), a name the bus never gives: a member
 * drops it, where a daemon would have replaced SENDER with the real name */
static void
test_misspelt_sender (gconstpointer data)
{
  Raw *r = raw_new (bus_address);
  Peer *receiver = peer_new (PEER_MEMBER);
  const gchar *dot = strchr (r->name, '.');
  gchar *misspelt;
  DBusMessage *m;

  g_assert_nonnull (dot);
  misspelt = g_strdup_printf ("%.*s.0%s", (int) (dot - r->name), r->name, dot + 1);

  m = new_signal (TEST_PATH, TEST_IFACE, "Misspelt", "", 1);
  dbus_message_set_destination (m, receiver->name);
  raw_send (r, m, misspelt);
  dbus_message_unref (m);
  m = new_signal (TEST_PATH, TEST_IFACE, "Genuine", "", 2);
  dbus_message_set_destination (m, receiver->name);
  raw_send (r, m, r->name);
  dbus_message_unref (m);

  m = peer_wait (receiver, is_from_test, NULL);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, r->name);
  g_assert_cmpstr (dbus_message_get_member (m), ==,
                   r->promoted ? "Genuine" : "Misspelt");
  dbus_message_unref (m);
  g_free (misspelt);
  raw_free (r);
  peer_free (receiver);
}

/* A member subscribes to a service's signals by its well-known name
 * (sender='...'); "loose" adds rules for 40 long unique names nobody has,
 * so many senders that its peer filter no longer compares SENDER.  A raw
 * member then sends a signal of the service's shape, signed with its own
 * name as the kernel requires: the subscriber gets only the service's.
 * When the name moves to another member, the former owner's signals stop
 * matching and the new owner's start, as on a stock bus. */
static void
test_spoofed_service (gconstpointer data)
{
  const gchar *name = "org.dbusmcast.BusTest.Spoofed";
  gboolean loose = strcmp (data, "loose") == 0;
  Peer *service, *heir, *subscriber;
  gchar *rule, *precision;
  DBusMessage *m;
  Raw *r;
  guint i;

  if (skip_unless_mcast ())
    return;

  service = peer_new (PEER_MEMBER);
  heir = peer_new (PEER_MEMBER);
  subscriber = peer_new (PEER_MEMBER);
  r = raw_new (bus_address);
  g_assert_true (r->promoted);
  g_assert_cmpuint (request_or_release (service, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  g_assert_cmpuint (request_or_release (heir, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_IN_QUEUE);

  rule = g_strdup_printf ("type='signal',sender='%s',interface='" TEST_IFACE "'", name);
  peer_add_match (subscriber, rule);
  g_free (rule);
  for (i = 0; loose && i < 40; i++)
    {
      /* about 120 instructions each in the filter's tree of senders */
      rule = g_strdup_printf ("type='signal',sender=':%c%u.%0240u'", 'a' + i % 26, i, 0);
      peer_add_match (subscriber, rule);
      g_free (rule);
    }
  precision = peer_filter_precision (subscriber);
  g_assert_cmpstr (precision, ==, loose ? "signals" : "exact");
  g_free (precision);

  m = new_signal (TEST_PATH, TEST_IFACE, "Changed", "spoofed", 1);
  raw_send (r, m, r->name);
  dbus_message_unref (m);
  emit (service, "Changed", "genuine", 2);
  m = peer_wait (subscriber, is_from_test, NULL);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, service->name);
  g_assert_cmpuint (signal_seq (m), ==, 2);
  dbus_message_unref (m);

  g_assert_cmpuint (request_or_release (service, "ReleaseName", name), ==,
                    DBUS_RELEASE_NAME_REPLY_RELEASED);
  emit (service, "Changed", "former owner", 3);
  emit (heir, "Changed", "new owner", 4);
  m = peer_wait (subscriber, is_from_test, NULL);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, heir->name);
  g_assert_cmpuint (signal_seq (m), ==, 4);
  dbus_message_unref (m);

  raw_free (r);
  peer_free (subscriber);
  peer_free (heir);
  peer_free (service);
}

typedef enum
{
  BAD_GARBAGE,
  BAD_FIELDS,
  BAD_TRUNCATED,
  BAD_BODY,
  BAD_TWO_IN_ONE,
  BAD_OVERSIZED,
  BAD_EMPTY
} BadPacket;

/* Writes a bad packet; the daemon may already have hung up on the raw
 * client because of an earlier one, so a failure is not an error */
static void
raw_send_bad (Raw        *r,
              const void *data,
              gsize       len)
{
  if (send (r->fd, data, len, MSG_NOSIGNAL) < 0)
    g_test_message ("bad packet not sent: %s", g_strerror (errno));
}

/* Makes the length of the first string of the body run past its end */
static void
corrupt_body (gchar *bytes,
              int    len)
{
  guint32 body_len, huge = 0x7fffffff;

  memcpy (&body_len, bytes + 4, sizeof (body_len));
  g_assert_cmpuint (body_len, >=, 4);
  memcpy (bytes + len - body_len, &huge, sizeof (huge));
}

/* The raw client writes bad packets: a call to member b, a broadcast
 * member a listens to.  Nobody crashes, no innocent client is
 * disconnected, no bad message reaches an application, the bus works */
static void
test_bad_packets (gconstpointer data)
{
  BadPacket kind = GPOINTER_TO_INT (data);
  Raw *r = raw_new (bus_address);
  Peer *a = peer_new (PEER_MEMBER);
  Peer *b = peer_new (PEER_MEMBER);
  Peer *c = peer_new (PEER_GDBUS);
  Peer *monitor = peer_new (PEER_MEMBER);
  DBusMessage *call = new_call (b->name, "Bad", "x");
  DBusMessage *m;
  DBusMessage *signal = new_signal (TEST_PATH, TEST_IFACE, "Bad", "broadcast", 1);
  gchar *bytes[2];
  int len[2];
  guint i;

  peer_add_match (a, "type='signal',interface='" TEST_IFACE "'");
  become_monitor (monitor);
  bytes[0] = raw_marshal (r, call, NULL, &len[0]);
  bytes[1] = raw_marshal (r, signal, NULL, &len[1]);
  dbus_message_unref (call);
  dbus_message_unref (signal);
  for (i = 0; i < G_N_ELEMENTS (bytes); i++)
    {
      switch (kind)
        {
        case BAD_GARBAGE:
          memset (bytes[i], 'x', len[i]);
          raw_send_bad (r, bytes[i], len[i]);
          break;
        case BAD_FIELDS:
          /* a valid fixed header, then garbage header fields */
          memset (bytes[i] + 16, 0xff, 16);
          raw_send_bad (r, bytes[i], len[i]);
          break;
        case BAD_TRUNCATED:
          raw_send_bad (r, bytes[i], len[i] - 3);
          break;
        case BAD_BODY:
          corrupt_body (bytes[i], len[i]);
          raw_send_bad (r, bytes[i], len[i]);
          break;
        case BAD_TWO_IN_ONE:
          {
            gchar *two = g_malloc (2 * len[i]);

            memcpy (two, bytes[i], len[i]);
            memcpy (two + len[i], bytes[i], len[i]);
            raw_send_bad (r, two, 2 * len[i]);
            g_free (two);
          }
          break;
        case BAD_OVERSIZED:
          {
            /* well framed, but one packet longer than any reader takes */
            gchar *text = g_strnfill (100000, 'x');
            DBusMessage *big = i == 0 ? new_call (b->name, "Bad", text) :
              new_signal (TEST_PATH, TEST_IFACE, "Bad", text, 2);
            gchar *packet;
            int packet_len;

            packet = raw_marshal (r, big, NULL, &packet_len);
            raw_send_bad (r, packet, packet_len);
            g_free (packet);
            dbus_message_unref (big);
            g_free (text);
          }
          break;
        case BAD_EMPTY:
          raw_send_bad (r, "", 0);
          break;
        default:
          g_assert_not_reached ();
        }
      g_free (bytes[i]);
    }

  /* The innocent still talk, in every direction, and saw nothing bad */
  assert_nothing_before_fence (a, b);
  assert_nothing_before_fence (b, a);
  assert_nothing_before_fence (b, c);
  echo_roundtrip (a, b, "still here");
  echo_roundtrip (c, a, "still here");
  /* the monitor's first call of the test is a's: it dropped the bad ones */
  m = peer_wait (monitor, is_test_call, NULL);
  g_assert_cmpstr (dbus_message_get_member (m), ==, "Echo");
  g_assert_cmpstr (dbus_message_get_sender (m), ==, a->name);
  dbus_message_unref (m);
  g_assert_true (peer_is_connected (a));
  g_assert_true (peer_is_connected (b));
  g_assert_true (peer_is_connected (c));
  g_assert_true (peer_is_connected (monitor));
  raw_free (r);
  peer_free (monitor);
  peer_free (a);
  peer_free (b);
  peer_free (c);
}

/* A monitor may not send: stock disconnects one that tries, before
 * anyone receives what it sent.  A raw member that became a monitor sends
 * a signal a member's rule matches and a call to that member: the member
 * gets neither, and the daemon hangs up on the monitor. */
static void
test_monitor_sends (gconstpointer data)
{
  const char *no_rules[] = { NULL };
  const char **rules = no_rules;
  dbus_uint32_t flags = 0;
  Peer *listener, *other;
  DBusMessage *m;
  GBytes *packet;
  gint64 deadline;
  gchar *bytes;
  int len;
  Raw *r;

  if (skip_unless_mcast ())
    return;
  r = raw_new (bus_address);
  listener = peer_new (PEER_MEMBER);
  other = peer_new (PEER_MEMBER);
  peer_add_match (listener, "type='signal',interface='" TEST_IFACE "'");

  m = dbus_message_new_method_call (DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                                    "org.freedesktop.DBus.Monitoring", "BecomeMonitor");
  g_assert_true (dbus_message_append_args (m, DBUS_TYPE_ARRAY, DBUS_TYPE_STRING, &rules, 0,
                                           DBUS_TYPE_UINT32, &flags, DBUS_TYPE_INVALID));
  dbus_message_unref (raw_wait (r, is_reply_to, GUINT_TO_POINTER (raw_send (r, m, NULL))));
  dbus_message_unref (m);

  m = new_signal (TEST_PATH, TEST_IFACE, "FromMonitor", "", 0);
  raw_send (r, m, NULL);
  dbus_message_unref (m);
  /* the daemon may have hung up already */
  m = new_call (listener->name, "FromMonitor", "");
  bytes = raw_marshal (r, m, NULL, &len);
  (void) send (r->fd, bytes, len, MSG_NOSIGNAL);
  g_free (bytes);
  dbus_message_unref (m);

  /* what it got as a monitor, then the end */
  deadline = g_get_monotonic_time () + TIMEOUT_US;
  while ((packet = raw_recv_packet (r, 100)) == NULL ||
         g_bytes_get_size (packet) > 0)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      if (packet != NULL)
        g_bytes_unref (packet);
    }
  g_bytes_unref (packet);

  assert_nothing_before_fence (other, listener);
  raw_free (r);
  peer_free (listener);
  peer_free (other);
}

/* The raw member tries to widen what it receives: replace its peer
 * filter, detach filters, change its sender id.  Each fails or has no
 * effect: a unicast between two others still does not reach it. */
static void
test_filter_tamper (gconstpointer data)
{
  Raw *r = raw_new (bus_address);
  Peer *a = peer_new (PEER_MEMBER);
  Peer *b = peer_new (PEER_MEMBER);
  struct sock_filter accept_all[] = { BPF_STMT (BPF_RET | BPF_K, 0xffffffff) };
  struct sock_fprog prog = { G_N_ELEMENTS (accept_all), accept_all };
  guint64 id = 1;
  int res;
  DBusMessage *m;

  res = setsockopt (r->fd, SOL_UNIX, UNIX_PEER_FILTER, &prog, sizeof (prog));
  g_test_message ("UNIX_PEER_FILTER: %d (%s)", res, res < 0 ? g_strerror (errno) : "");
  g_assert_cmpint (res, ==, -1);
  if (r->promoted)
    g_assert_cmpint (errno, ==, EPERM);
  res = setsockopt (r->fd, SOL_UNIX, UNIX_PEER_ID, &id, sizeof (id));
  g_assert_cmpint (res, ==, -1);
  if (r->promoted)
    g_assert_cmpint (errno, ==, EPERM);
  res = setsockopt (r->fd, SOL_SOCKET, SO_DETACH_FILTER, NULL, 0);
  g_test_message ("SO_DETACH_FILTER: %d (%s)", res, res < 0 ? g_strerror (errno) : "");

  /* a unicast from a to b, then one from a to the raw client: the raw
   * client gets its own only */
  m = new_signal (TEST_PATH, TEST_IFACE, "Secret", "for b only", 1);
  dbus_message_set_destination (m, b->name);
  peer_send (a, m);
  dbus_message_unref (m);
  echo_roundtrip (a, b, "secret call");
  m = new_signal (TEST_PATH, TEST_IFACE, "Fence", "", 2);
  dbus_message_set_destination (m, r->name);
  peer_send (a, m);
  dbus_message_unref (m);
  m = raw_wait (r, is_from_test, NULL);
  g_assert_cmpstr (dbus_message_get_member (m), ==, "Fence");
  g_assert_cmpstr (dbus_message_get_destination (m), ==, r->name);
  dbus_message_unref (m);
  raw_free (r);
  peer_free (a);
  peer_free (b);
}

static gboolean
is_reply_or_fence (DBusMessage *m, gconstpointer data)
{
  return dbus_message_get_type (m) == DBUS_MESSAGE_TYPE_METHOD_RETURN ||
      dbus_message_get_type (m) == DBUS_MESSAGE_TYPE_ERROR ||
      dbus_message_is_signal (m, TEST_IFACE, "Fence");
}

/* Replies to a member from a hand-made member.  Those nobody asked for
 * (to a serial the victim never used, a second reply to a call already
 * answered) reach it, as stock delivers them under the session policy,
 * whose <allow send_destination="*" eavesdrop="true"/> allows unrequested
 * replies (bus/policy.c), in order; those signed as another member, and a
 * reply to a call the victim waits for from someone else than the callee,
 * do not (design.md, "What a member's libdbus checks"): the callee's
 * reply still answers that call.  The victim calls the server by its
 * unique name, or ("well-known") by a name the server owns: the kernel
 * told the victim which member got that call (UNIX_GROUP_SENT_TO). */
static void
test_unsolicited_reply (gconstpointer data)
{
  const gchar *service = "org.dbusmcast.Test.Answering";
  gboolean by_name = g_strcmp0 (data, "well-known") == 0;
  Raw *r;
  Peer *victim, *server;
  DBusMessage *call, *reply, *m;
  dbus_uint32_t answered, waiting;
  dbus_uint32_t serials[2];
  guint64 dispatched;
  guint i;

  if (skip_unless_mcast ())
    return;
  r = raw_new (bus_address);
  victim = peer_new (PEER_MEMBER);
  server = peer_new (PEER_MEMBER);
  if (by_name)
    g_assert_cmpuint (request_or_release (server, "RequestName", service), ==,
                      DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);

  call = new_call (by_name ? service : server->name, "Echo", "once");
  answered = peer_send (victim, call);
  dbus_message_unref (call);
  dbus_message_unref (serve_one (server));
  reply = peer_wait (victim, is_reply_to, GUINT_TO_POINTER (answered));
  dbus_message_unref (reply);
  dispatched = get_stat (victim, "MessagesDispatched");
  call = new_call (by_name ? service : server->name, "Echo", "later");
  waiting = peer_send (victim, call);
  dbus_message_unref (call);

  serials[0] = 0x7ffffff0;
  serials[1] = answered;
  for (i = 0; i <= G_N_ELEMENTS (serials); i++)
    {
      m = dbus_message_new (DBUS_MESSAGE_TYPE_METHOD_RETURN);
      dbus_message_set_destination (m, victim->name);
      dbus_message_set_reply_serial (m, i < G_N_ELEMENTS (serials) ? serials[i] : waiting);
      /* signed as the server: dropped */
      raw_send (r, m, server->name);
      if (i < G_N_ELEMENTS (serials))
        raw_send (r, m, NULL);
      dbus_message_unref (m);
      m = dbus_message_new (DBUS_MESSAGE_TYPE_ERROR);
      dbus_message_set_destination (m, victim->name);
      dbus_message_set_reply_serial (m, i < G_N_ELEMENTS (serials) ? serials[i] : waiting);
      dbus_message_set_error_name (m, TEST_ERROR);
      raw_send (r, m, NULL);
      dbus_message_unref (m);
    }

  /* the raw client's fence follows them */
  {
    DBusMessage *fence = new_signal (TEST_PATH, TEST_IFACE, "Fence", "", 0);

    dbus_message_set_destination (fence, victim->name);
    raw_send (r, fence, NULL);
    dbus_message_unref (fence);
  }
  for (i = 0; i < 2 * G_N_ELEMENTS (serials); i++)
    {
      reply = peer_wait (victim, is_reply_or_fence, NULL);
      g_assert_cmpstr (dbus_message_get_sender (reply), ==, r->name);
      g_assert_cmpuint (dbus_message_get_reply_serial (reply), ==, serials[i / 2]);
      g_assert_cmpint (dbus_message_get_type (reply), ==,
                       i % 2 == 0 ? DBUS_MESSAGE_TYPE_METHOD_RETURN : DBUS_MESSAGE_TYPE_ERROR);
      dbus_message_unref (reply);
    }
  reply = peer_wait (victim, is_reply_or_fence, NULL);
  if (!dbus_message_is_signal (reply, TEST_IFACE, "Fence"))
    g_error ("%s received a forged or spoofed %s (reply serial %u, sender %s)", victim->name,
             dbus_message_type_to_string (dbus_message_get_type (reply)),
             dbus_message_get_reply_serial (reply), dbus_message_get_sender (reply));
  dbus_message_unref (reply);

  /* the call still waits for the server */
  dbus_message_unref (serve_one (server));
  reply = peer_wait (victim, is_reply_to, GUINT_TO_POINTER (waiting));
  g_assert_cmpstr (dbus_message_get_sender (reply), ==, server->name);
  assert_echo (reply, "later");
  dbus_message_unref (reply);
  /* the call and its reply went through the kernel alone */
  assert_nothing_dispatched (victim, dispatched);

  raw_free (r);
  peer_free (victim);
  peer_free (server);
}

static gboolean
is_departed (DBusMessage *m, gconstpointer data)
{
  return dbus_message_is_signal (m, DBUS_MCAST_INTERFACE, DBUS_MCAST_DEPARTED);
}

/* Only a member that may await a reply from a member that left is told
 * (Departed): one whose table lists a call to it, or a call whose callee
 * it does not know yet; one that lists none is not.  Two hand-made
 * members, the daemon's signals seen as they come. */
static void
test_departed_to_callers (gconstpointer data)
{
  DBusMcastCallTable *table[3];
  Peer *callee;
  DBusMessage *m, *call;
  dbus_uint32_t serial;
  Raw *r[3];
  guint i;

  if (skip_unless_mcast ())
    return;
  for (i = 0; i < 3; i++)
    r[i] = raw_new_with_table (bus_address, &table[i]);
  callee = peer_new (PEER_MEMBER);
  /* r[0] awaits nothing, r[1] a reply from callee, r[2] one from a member
   * the kernel has not named yet */
  table[1]->calls[0].serial = 7;
  table[1]->calls[0].peer = _dbus_mcast_sender_id_of_name (callee->name);
  table[1]->n_slots = 1;
  table[2]->calls[0].serial = 7;
  table[2]->calls[0].peer = DBUS_MCAST_CALLS_UNKNOWN_CALLEE;
  table[2]->n_slots = 1;
  peer_free (callee);

  for (i = 1; i < 3; i++)
    dbus_message_unref (raw_wait (r[i], is_departed, NULL));

  /* sent with theirs: it would come before the reply to a later call */
  call = dbus_message_new_method_call (DBUS_SERVICE_DBUS, DBUS_PATH_DBUS,
                                       DBUS_INTERFACE_DBUS, "GetId");
  serial = raw_send (r[0], call, NULL);
  dbus_message_unref (call);
  while ((m = raw_recv (r[0], TIMEOUT_US / 1000)) != NULL &&
         !is_reply_to (m, GUINT_TO_POINTER (serial)))
    {
      g_assert_false (is_departed (m, NULL));
      dbus_message_unref (m);
    }
  g_assert_nonnull (m);
  dbus_message_unref (m);

  for (i = 0; i < 3; i++)
    {
      munmap (table[i], sizeof (*table[i]));
      raw_free (r[i]);
    }
}

static gboolean
is_no_reply_to (DBusMessage *m, gconstpointer data)
{
  const gchar * const *call = data;

  return is_no_reply (m, NULL) &&
      g_strcmp0 (dbus_message_get_destination (m), call[0]) == 0 &&
      dbus_message_get_reply_serial (m) == GPOINTER_TO_UINT (call[1]);
}

/* The monitor sees stock's NoReply error to caller's call serial */
static void
monitor_sees_no_reply (Peer          *monitor,
                       const gchar   *caller,
                       dbus_uint32_t  serial)
{
  gconstpointer call[2] = { caller, GUINT_TO_POINTER (serial) };
  DBusMessage *m = peer_wait (monitor, is_no_reply_to, call);

  assert_no_reply (m, serial);
  dbus_message_unref (m);
}

/* A member that lies in its table of calls (dbus/dbus-mcast-calls.h):
 * it cannot resize it, lists a call to another member in every slot,
 * says it used more slots than there are, and lists replies to another
 * caller's calls.  A monitor that comes later still sees the NoReply
 * error of a real call between two other members, and the liar's lies
 * show it errors to the liar only. */
static void
test_lying_calls_table (gconstpointer data)
{
  DBusMcastCallTable *table;
  Peer *caller, *callee, *monitor;
  dbus_uint64_t callee_id, caller_id;
  dbus_uint32_t serial;
  guint i, to_liar = 0;
  GList *seen, *l;
  DBusMessage *m;
  Raw *r;
  int fd;

  if (skip_unless_mcast ())
    return;
  r = raw_new_with_calls (bus_address, &fd);

  /* The daemon's mapping stays whole */
  g_assert_cmpint (ftruncate (fd, 0), ==, -1);
  g_assert_cmpint (errno, ==, EPERM);
  g_assert_cmpint (ftruncate (fd, 1 << 24), ==, -1);
  g_assert_cmpint (errno, ==, EPERM);
  table = map_calls (fd);
  close (fd);

  caller = peer_new (PEER_MEMBER);
  callee = peer_new (PEER_MEMBER);
  monitor = peer_new (PEER_CLASSIC);
  callee_id = _dbus_mcast_sender_id_of_name (callee->name);
  caller_id = _dbus_mcast_sender_id_of_name (caller->name);
  m = new_call (callee->name, "Hang", NULL);
  serial = peer_send (caller, m);
  dbus_message_unref (m);
  dbus_message_unref (peer_wait (callee, is_test_call, NULL));

  table->n_slots = G_MAXUINT32;
  for (i = 0; i < DBUS_MCAST_CALLS_SLOTS; i++)
    table->calls[i] = (DBusMcastCallEntry) { .peer = callee_id, .serial = i + 1 };
  for (i = 0; i < DBUS_MCAST_CALLS_REPLIES; i++)
    table->replies[i] = (DBusMcastCallEntry) { .peer = caller_id, .serial = serial };

  become_monitor (monitor);
  peer_free (callee);

  monitor_sees_no_reply (monitor, caller->name, serial);

  /* Everything else the departure showed: errors to the liar */
  seen = monitor_until_after (monitor, caller);
  for (l = seen; l != NULL; l = l->next)
    if (is_no_reply (l->data, NULL))
      {
        g_assert_cmpstr (dbus_message_get_destination (l->data), ==, r->name);
        to_liar++;
      }
  g_list_free_full (seen, (GDestroyNotify) dbus_message_unref);
  g_assert_cmpuint (to_liar, <=, DBUS_MCAST_CALLS_SLOTS);
  g_test_message ("the liar's table showed the monitor %u errors to itself", to_liar);

  /* the liar still works */
  raw_roundtrip (r, caller);
  munmap (table, sizeof (*table));
  raw_free (r);
  peer_free (monitor);
  peer_free (caller);
}

/* A callee killed after it listed its reply (dbus/dbus-mcast-calls.h)
 * and before it sent it never answered: a monitor that came in between
 * shows the call's NoReply error when the callee leaves, as stock does.
 * The callee is a hand-made member that lists the reply as libdbus does,
 * in its first send since its Hello, and is closed instead. */
static void
test_no_reply_monitor_later_unsent (gconstpointer data)
{
  Peer *caller, *monitor;
  DBusMcastCallTable *table;
  guint64 dispatched;
  dbus_uint32_t serial;
  DBusMessage *m;
  Raw *callee;

  if (skip_unless_mcast ())
    return;
  callee = raw_new_with_table (bus_address, &table);
  caller = peer_new (PEER_MEMBER);
  monitor = peer_new (PEER_CLASSIC);

  peer_sync (caller);
  dispatched = get_stat (caller, "MessagesDispatched");
  m = new_call (callee->name, "Hang", NULL);
  serial = peer_send (caller, m);
  dbus_message_unref (m);
  dbus_message_unref (raw_wait (callee, is_test_call, NULL));
  assert_nothing_dispatched (caller, dispatched);

  table->replies[0].serial = serial;
  table->replies[0].sends = 1;
  __atomic_store_n (&table->replies[0].peer,
                    _dbus_mcast_sender_id_of_name (caller->name),
                    __ATOMIC_RELEASE);

  become_monitor (monitor);
  munmap (table, sizeof (*table));
  raw_free (callee);
  monitor_sees_no_reply (monitor, caller->name, serial);
  m = peer_wait (caller, is_reply_to, GUINT_TO_POINTER (serial));
  assert_no_reply (m, serial);
  dbus_message_unref (m);

  peer_free (monitor);
  peer_free (caller);
}

/* A caller stopped after it sent a call to a well-known name and before
 * it wrote which member the kernel gave it to (dbus/dbus-mcast-calls.h;
 * a process stopped in a debugger): a monitor that comes then shows the
 * call's NoReply error when that member leaves, as stock does.  The
 * caller is a hand-made member that lists the call as libdbus does,
 * callee unknown, to go in its first send since its Hello, and stops
 * there; the call passes the kernel alone. */
static void
test_no_reply_monitor_later_unnamed (gconstpointer data)
{
  const gchar *name = "org.dbusmcast.BusTest.Unnamed";
  Peer *callee, *monitor;
  DBusMcastCallTable *table;
  guint64 dispatched;
  dbus_uint32_t serial;
  DBusMessage *m;
  Raw *caller;

  if (skip_unless_mcast ())
    return;
  caller = raw_new_with_table (bus_address, &table);
  callee = peer_new (PEER_MEMBER);
  monitor = peer_new (PEER_CLASSIC);
  g_assert_cmpuint (request_or_release (callee, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);

  peer_sync (callee);
  dispatched = get_stat (callee, "MessagesDispatched");
  table->calls[0].serial = caller->serial + 1;
  table->calls[0].sends = 1;
  table->calls[0].peer = DBUS_MCAST_CALLS_UNKNOWN_CALLEE;
  __atomic_store_n (&table->n_slots, 1, __ATOMIC_RELEASE);
  m = new_call (name, "Hang", NULL);
  serial = raw_send (caller, m, NULL);
  dbus_message_unref (m);
  g_assert_cmpuint (serial, ==, table->calls[0].serial);
  dbus_message_unref (peer_wait (callee, is_test_call, NULL));
  assert_nothing_dispatched (callee, dispatched);

  become_monitor (monitor);
  peer_free (callee);

  /* The caller is hand-made: it would make its own error */
  monitor_sees_no_reply (monitor, caller->name, serial);

  munmap (table, sizeof (*table));
  raw_free (caller);
  peer_free (monitor);
}

/* A hand-made member's Departed signal to a member that awaits a reply
 * from a well-known name: signed as the daemon, it is dropped (the
 * kernel's id says who sent it); signed as itself, it is an ordinary
 * signal from a peer.  Neither ends the call, which the callee's reply
 * still answers. */
static void
test_forged_departed (gconstpointer data)
{
  const gchar *name = "org.dbusmcast.BusTest.Departing";
  DBusMessage *call, *m;
  Peer *victim, *server;
  dbus_uint32_t waiting;
  const char *server_name;
  Raw *r;
  guint i;

  if (skip_unless_mcast ())
    return;
  r = raw_new (bus_address);
  victim = peer_new (PEER_MEMBER);
  server = peer_new (PEER_MEMBER);
  server_name = server->name;
  g_assert_cmpuint (request_or_release (server, "RequestName", name), ==,
                    DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
  call = new_call (name, "Echo", "still waiting");
  waiting = peer_send (victim, call);
  dbus_message_unref (call);
  call = peer_wait (server, is_test_call, NULL);

  for (i = 0; i < 2; i++)
    {
      m = _dbus_mcast_departed_new (&server_name, 1);
      g_assert_nonnull (m);
      g_assert_true (dbus_message_set_destination (m, victim->name));
      raw_send (r, m, i == 0 ? DBUS_SERVICE_DBUS : NULL);
      dbus_message_unref (m);
    }

  /* the raw client's fence follows them */
  m = new_signal (TEST_PATH, TEST_IFACE, "Fence", "", 0);
  dbus_message_set_destination (m, victim->name);
  raw_send (r, m, NULL);
  dbus_message_unref (m);

  m = peer_wait (victim, is_departed, NULL);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, r->name);
  dbus_message_unref (m);
  m = peer_wait (victim, is_reply_or_fence, NULL);
  if (!dbus_message_is_signal (m, TEST_IFACE, "Fence"))
    g_error ("%s received a %s to serial %u after a forged Departed signal",
             victim->name, dbus_message_type_to_string (dbus_message_get_type (m)),
             dbus_message_get_reply_serial (m));
  dbus_message_unref (m);

  /* the call still waits for the server */
  m = dbus_message_new_method_return (call);
  peer_send (server, m);
  dbus_message_unref (m);
  dbus_message_unref (call);
  m = peer_wait (victim, is_reply_to, GUINT_TO_POINTER (waiting));
  g_assert_cmpint (dbus_message_get_type (m), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, server->name);
  dbus_message_unref (m);

  raw_free (r);
  peer_free (victim);
  peer_free (server);
}

/* Sends m as the raw client with the SENDER it has (or none), to the
 * group or, with direct, to the daemon alone (SCM_UNIX_DIRECT); returns
 * the serial */
static dbus_uint32_t
raw_send_as_is (Raw         *r,
                DBusMessage *m,
                gboolean     direct)
{
  union
  {
    struct cmsghdr align;
    char buf[CMSG_SPACE (0)];
  } control;
  struct iovec iov;
  struct msghdr msg;
  struct cmsghdr *cm;
  char *bytes = NULL;
  int len;

  dbus_message_set_serial (m, ++r->serial);
  g_assert_true (dbus_message_marshal (m, &bytes, &len));
  iov.iov_base = bytes;
  iov.iov_len = len;
  memset (&msg, 0, sizeof (msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (direct)
    {
      memset (&control, 0, sizeof (control));
      msg.msg_control = control.buf;
      msg.msg_controllen = sizeof (control.buf);
      cm = CMSG_FIRSTHDR (&msg);
      cm->cmsg_level = SOL_UNIX;
      cm->cmsg_type = SCM_UNIX_DIRECT;
      cm->cmsg_len = CMSG_LEN (0);
    }
  g_assert_cmpint (sendmsg (r->fd, &msg, MSG_NOSIGNAL), ==, len);
  dbus_free (bytes);
  return r->serial;
}

/* A call from a hand-made member without SENDER, which our libdbus sends
 * only to the daemon, for a call over the bus's reply limit.  Sent to the
 * group, it reaches nobody: the victim drops what is not signed with its
 * sender's name, so the call it serves next is the raw client's signed
 * one.  Sent to the daemon, the daemon refuses it as over the limit.
 * Only its sender is harmed. */
static void
test_call_without_sender (gconstpointer data)
{
  Peer *victim;
  DBusMessage *m;
  Raw *r;

  if (skip_unless_mcast ())
    return;

  victim = peer_new (PEER_MEMBER);
  r = raw_new (bus_address);
  m = new_call (victim->name, "Echo", "unsigned");
  raw_send_as_is (r, m, FALSE);
  raw_roundtrip (r, victim);

  dbus_message_unref (m);
  m = new_call (victim->name, "Echo", "unsigned, to the daemon");
  raw_send_as_is (r, m, TRUE);
  dbus_message_unref (m);
  m = raw_wait (r, is_reply_to, GUINT_TO_POINTER (r->serial));
  assert_over_reply_limit (m);
  dbus_message_unref (m);
  raw_roundtrip (r, victim);

  raw_free (r);
  peer_free (victim);
}

/* A hand-made member sends the daemon alone (SCM_UNIX_DIRECT) a call the
 * group could have carried, signed with another member's name: it
 * reached nobody else, so the daemon routes it to the member callee as
 * stock routes a call, with the sender's own name, and answers it with
 * its fence.  Only the daemon's SENDER reaches the callee. */
static void
test_direct_spoofed_sender (gconstpointer data)
{
  Peer *victim, *other;
  DBusMessage *m, *call;
  guint64 straight;
  Raw *r;

  if (skip_unless_mcast ())
    return;

  victim = peer_new (PEER_MEMBER);
  other = peer_new (PEER_MEMBER);
  r = raw_new (bus_address);
  straight = get_stat (victim, "MulticastStraightDispatched");

  m = new_call (victim->name, "Echo", "direct, signed as another");
  g_assert_true (dbus_message_set_sender (m, other->name));
  raw_send_as_is (r, m, TRUE);
  dbus_message_unref (m);
  call = serve_one (victim);
  g_assert_cmpstr (dbus_message_get_sender (call), ==, r->name);
  dbus_message_unref (call);
  m = raw_wait (r, is_reply_to, GUINT_TO_POINTER (r->serial));
  assert_echo (m, "direct, signed as another");
  dbus_message_unref (m);
  g_assert_cmpuint (get_stat (victim, "MulticastStraightDispatched") - straight, ==, 1);
  raw_roundtrip (r, victim);

  raw_free (r);
  peer_free (other);
  peer_free (victim);
}

/* The bus at address does not promote: a hand-made client's
 * NEGOTIATE_MULTICAST is refused, and p, its client, sees no member */
static void
assert_no_promotion (const gchar *address,
                     Peer        *p)
{
  Raw *r = raw_new (address);

  g_assert_false (r->promoted);
  raw_free (r);
  if (kernel_has_mcast ())
    g_assert_cmpuint (get_stat (p, "MulticastMembers"), ==, 0);
}

/* ReloadConfig on the bus at address, by p */
static void
reload_config (Peer *p)
{
  dbus_message_unref (driver_call (p, DBUS_INTERFACE_DBUS, "ReloadConfig",
                                   DBUS_TYPE_INVALID));
}

/* Writes the reloading bus's configuration @config, with @extra before
 * its end if not NULL, and has admin reload it */
static void
reload_with (Peer        *admin,
             const gchar *config,
             const gchar *extra)
{
  GString *edited = g_string_new (config);

  if (extra != NULL)
    g_assert_cmpint (g_string_replace (edited, "</busconfig>", extra, 1), ==, 1);
  g_assert_true (g_file_set_contents (reloading_config, edited->str, -1, NULL));
  g_string_free (edited, TRUE);
  reload_config (admin);
}

/* A reload that makes the bus stop promoting (a deny rule) after a
 * client agreed to NEGOTIATE_MULTICAST and before its Hello: the client
 * waits for the Hello reply as a member would, so the daemon disconnects
 * it then, as it disconnects the members at the reload.  Once the rule
 * is gone again, the bus promotes again. */
static void
test_reload_before_hello (gconstpointer data)
{
  gchar *config;
  Peer *admin;
  GBytes *packet;
  Raw *r;

  if (reloading_address == NULL || reloading_config == NULL)
    {
      g_test_skip ("DBUS_MCAST_TEST_RELOADING_ADDRESS is not set");
      return;
    }
  if (!kernel_has_mcast ())
    {
      g_test_skip ("the kernel has no multicast AF_UNIX: the bus is classic");
      return;
    }

  admin = peer_new_on (PEER_CLASSIC, reloading_address);
  r = raw_connect (reloading_address);
  g_assert_true (r->promoted);

  g_assert_true (g_file_get_contents (reloading_config, &config, NULL, NULL));
  reload_with (admin, config,
               "<policy context=\"default\"><deny send_interface=\""
               DENIED_IFACE "\"/></policy></busconfig>");

  raw_send_hello (r);
  /* no Hello reply, only the end of the connection */
  while ((packet = raw_recv_packet (r, 10000)) != NULL && g_bytes_get_size (packet) > 0)
    {
      DBusMessage *m = dbus_message_demarshal (g_bytes_get_data (packet, NULL),
                                               g_bytes_get_size (packet), NULL);

      g_assert_nonnull (m);
      g_assert_false (is_reply_to (m, GUINT_TO_POINTER (r->serial)));
      dbus_message_unref (m);
      g_bytes_unref (packet);
    }
  g_assert_nonnull (packet);
  g_bytes_unref (packet);
  raw_free (r);

  reload_with (admin, config, NULL);
  r = raw_new (reloading_address);
  g_assert_true (r->promoted);
  raw_free (r);

  g_free (config);
  peer_free (admin);
}

/* ---- a bus with a deny rule ------------------------------------------------ */

/* Its clients stay classic, and the deny rule holds */
static void
test_restricted (gconstpointer data)
{
  Peer *a, *b;
  Raw *r;
  DBusMessage *m, *reply;

  if (restricted_address == NULL)
    {
      g_test_skip ("DBUS_MCAST_TEST_RESTRICTED_ADDRESS is not set");
      return;
    }
  a = peer_new_on (PEER_MEMBER, restricted_address);
  b = peer_new_on (PEER_MEMBER, restricted_address);
  assert_no_promotion (restricted_address, a);
  r = raw_new (restricted_address);
  echo_roundtrip (a, b, "allowed");

  m = dbus_message_new_method_call (b->name, TEST_PATH, DENIED_IFACE, "Echo");
  reply = peer_call (a, m);
  dbus_message_unref (m);
  g_assert_cmpstr (dbus_message_get_error_name (reply), ==, DBUS_ERROR_ACCESS_DENIED);
  g_assert_cmpstr (dbus_message_get_sender (reply), ==, DBUS_SERVICE_DBUS);
  dbus_message_unref (reply);

  peer_add_match (b, "type='signal'");
  m = new_signal (TEST_PATH, DENIED_IFACE, "Denied", "broadcast", 1);
  peer_send (a, m);
  dbus_message_unref (m);
  m = new_signal (TEST_PATH, DENIED_IFACE, "Denied", "raw", 2);
  raw_send (r, m, NULL);
  dbus_message_unref (m);
  raw_roundtrip (r, b);
  assert_nothing_before_fence (a, b);

  raw_free (r);
  peer_free (a);
  peer_free (b);
}

/* A bus whose max_message_size is smaller than a packet keeps its
 * unixseq: clients classic: a member's message of up to a packet goes
 * through the group, where nobody could refuse one over the limit.  Over
 * it, the daemon disconnects the sender, as stock does, and the receiver
 * gets nothing. */
static void
test_small_messages (gconstpointer data)
{
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_US;
  Peer *a, *b, *c;
  DBusMessage *m;
  gchar *text;

  if (small_address == NULL)
    {
      g_test_skip ("DBUS_MCAST_TEST_SMALL_ADDRESS is not set");
      return;
    }
  a = peer_new_on (PEER_MEMBER, small_address);
  b = peer_new_on (PEER_MEMBER, small_address);
  c = peer_new_on (PEER_MEMBER, small_address);
  assert_no_promotion (small_address, a);
  echo_roundtrip (a, b, "small enough");

  text = g_strnfill (SMALL_MESSAGE_LIMIT, 'x');
  m = new_call (b->name, "Echo", text);
  g_free (text);
  g_assert_true (dbus_connection_send (a->dc, m, NULL));
  dbus_message_unref (m);
  dbus_connection_flush (a->dc);
  while (dbus_connection_read_write (a->dc, 100))
    g_assert_cmpint (g_get_monotonic_time (), <, deadline);
  g_assert_false (dbus_connection_get_is_connected (a->dc));
  assert_nothing_before_fence (c, b);

  peer_free (a);
  peer_free (b);
  peer_free (c);
}

/* A bus with a reply timeout keeps its unixseq: clients classic: calls
 * between members would not pass the daemon, which times them out.  A
 * call nobody answers gets stock's NoReply from the daemon after the
 * timeout. */
static void
test_reply_timeout (gconstpointer data)
{
  Peer *a, *b;
  DBusMessage *m;
  const char *text = NULL;
  dbus_uint32_t serial;
  gint64 start;

  if (timed_address == NULL)
    {
      g_test_skip ("DBUS_MCAST_TEST_TIMED_ADDRESS is not set");
      return;
    }
  a = peer_new_on (PEER_MEMBER, timed_address);
  b = peer_new_on (PEER_MEMBER, timed_address);
  assert_no_promotion (timed_address, a);

  m = new_call (b->name, "Hang", NULL);
  start = g_get_monotonic_time ();
  serial = peer_send (a, m);
  dbus_message_unref (m);
  dbus_message_unref (peer_wait (b, is_test_call, NULL));
  m = peer_wait (a, is_reply_to, GUINT_TO_POINTER (serial));
  g_assert_cmpint (g_get_monotonic_time () - start, >=, REPLY_TIMEOUT_MS * 1000);
  g_assert_cmpstr (dbus_message_get_error_name (m), ==, DBUS_ERROR_NO_REPLY);
  g_assert_cmpstr (dbus_message_get_sender (m), ==, DBUS_SERVICE_DBUS);
  g_assert_true (dbus_message_get_args (m, NULL, DBUS_TYPE_STRING, &text, DBUS_TYPE_INVALID));
  g_assert_cmpstr (text, ==, "Message did not receive a reply (timeout by message bus)");
  dbus_message_unref (m);

  peer_free (a);
  peer_free (b);
}

/* ---- the reply limit ------------------------------------------------------- */

/* caller calls callee, which holds the call: returns the serial */
static dbus_uint32_t
call_held (Peer        *caller,
           Peer        *callee,
           const gchar *text,
           GQueue      *held)
{
  DBusMessage *m = new_call (callee->name, "Echo", text);
  dbus_uint32_t serial = peer_send (caller, m);

  dbus_message_unref (m);
  g_queue_push_tail (held, peer_wait (callee, is_test_call, NULL));
  return serial;
}

/* caller's call to destination, with fd if >= 0, is refused as over the
 * reply limit */
static void
call_refused (Peer        *caller,
              const gchar *destination,
              int          fd)
{
  DBusMessage *m = new_call (destination, "Echo", "over the limit");
  dbus_uint32_t serial;

  if (fd >= 0)
    g_assert_true (dbus_message_append_args (m, DBUS_TYPE_UNIX_FD, &fd, DBUS_TYPE_INVALID));
  serial = peer_send (caller, m);
  dbus_message_unref (m);
  m = peer_wait (caller, is_reply_to, GUINT_TO_POINTER (serial));
  assert_over_reply_limit (m);
  dbus_message_unref (m);
}

/* callee answers the calls it held; caller gets each reply */
static void
answer_held (Peer   *caller,
             Peer   *callee,
             GQueue *held)
{
  DBusMessage *call, *reply;

  while ((call = g_queue_pop_head (held)) != NULL)
    {
      reply = dbus_message_new_method_return (call);
      peer_send (callee, reply);
      dbus_message_unref (reply);
      reply = peer_wait (caller, is_reply_to,
                         GUINT_TO_POINTER (dbus_message_get_serial (call)));
      g_assert_cmpint (dbus_message_get_type (reply), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
      dbus_message_unref (reply);
      dbus_message_unref (call);
    }
}

/* A member that awaits replies to as many calls as its table lists
 * (DBUS_MCAST_CALLS_SLOTS, dbus/dbus-mcast-calls.h) sends the next call
 * to the daemon alone: the daemon routes it to the member callee and
 * lets the caller go on, and the answer comes back.  The daemon once took
 * such a call, which the group could have carried, for a group copy: it
 * reached nobody, and the caller waited for its fence for ever. */
static void
test_calls_beyond_table (gconstpointer data)
{
  GQueue held = G_QUEUE_INIT, beyond = G_QUEUE_INIT;
  guint64 straight;
  Peer *a, *b;
  guint i;

  if (skip_unless_mcast ())
    return;
  a = peer_new (PEER_MEMBER);
  b = peer_new (PEER_MEMBER);

  for (i = 0; i < DBUS_MCAST_CALLS_SLOTS; i++)
    call_held (a, b, "listed", &held);
  straight = get_stat (a, "MulticastStraightDispatched");
  call_held (a, b, "beyond the table", &beyond);
  g_assert_cmpuint (get_stat (a, "MulticastStraightDispatched") - straight, ==, 1);
  echo_roundtrip (a, b, "after it");
  answer_held (a, b, &beyond);

  g_queue_clear_full (&held, (GDestroyNotify) dbus_message_unref);
  peer_free (b);
  peer_free (a);
}

/* Must match the max_replies_per_connection test/bus/run gives the
 * replies bus */
#define REPLIES_LIMIT 3

/* Upstream's /limits/max-replies-per-connection (which needs a bus of
 * its own) between two kinds of client: with REPLIES_LIMIT calls awaiting
 * replies, the caller gets stock's LimitsExceeded from the bus driver for
 * the next two, which reach nobody; once the callee answers, calls go
 * through again.  Between members, the calls that go through pass the
 * group, not the daemon, and the refused ones come to the daemon
 * straight. */
static void
test_max_replies (gconstpointer data)
{
  PeerKind kinds[2];
  GQueue held = G_QUEUE_INIT;
  gboolean fast;
  guint64 dispatched = 0, straight = 0;
  Peer *a, *b;
  guint i;

  if (replies_address == NULL)
    {
      g_test_skip ("DBUS_MCAST_TEST_REPLIES_ADDRESS is not set");
      return;
    }
  parse_kinds (data, kinds, 2);
  a = peer_new_on (kinds[0], replies_address);
  b = peer_new_on (kinds[1], replies_address);
  fast = kernel_has_mcast () && kinds[0] == PEER_MEMBER && kinds[1] == PEER_MEMBER;
  if (fast)
    {
      g_assert_cmpuint (get_stat (a, "MulticastMembers"), >=, 2);
      dispatched = get_stat (a, "MessagesDispatched");
    }

  for (i = 0; i < REPLIES_LIMIT; i++)
    call_held (a, b, "held", &held);
  if (fast)
    {
      assert_nothing_dispatched (a, dispatched);
      straight = get_stat (a, "MulticastStraightDispatched");
    }

  for (i = 0; i < 2; i++)
    call_refused (a, b->name, -1);
  if (fast)
    g_assert_cmpuint (get_stat (a, "MulticastStraightDispatched") - straight, ==, 2);
  assert_nothing_before_fence (a, b);

  answer_held (a, b, &held);
  echo_roundtrip (a, b, "room again");

  peer_free (a);
  peer_free (b);
}

/* A member's calls count together, whoever answers them: with calls
 * held by a member and by a classic client, the next call to either is
 * refused (the daemon alone sees one call of the three), a call with an
 * fd, which goes to the daemon anyway, too; an answer makes room for
 * one more call to a member. */
static void
test_max_replies_mixed (gconstpointer data)
{
  GQueue held_by_b = G_QUEUE_INIT, held_by_c = G_QUEUE_INIT;
  Peer *a, *b, *c;
  int fds[2];

  if (replies_address == NULL)
    {
      g_test_skip ("DBUS_MCAST_TEST_REPLIES_ADDRESS is not set");
      return;
    }
  a = peer_new_on (PEER_MEMBER, replies_address);
  b = peer_new_on (PEER_MEMBER, replies_address);
  c = peer_new_on (PEER_CLASSIC, replies_address);
  g_assert_cmpint (pipe (fds), ==, 0);

  call_held (a, b, "to b", &held_by_b);
  call_held (a, b, "to b", &held_by_b);
  call_held (a, c, "to c", &held_by_c);
  call_refused (a, c->name, -1);
  call_refused (a, b->name, -1);
  call_refused (a, b->name, fds[0]);
  assert_nothing_before_fence (a, b);
  assert_nothing_before_fence (a, c);

  answer_held (a, c, &held_by_c);
  call_held (a, b, "to b again", &held_by_b);
  call_refused (a, b->name, -1);
  answer_held (a, b, &held_by_b);

  close (fds[0]);
  close (fds[1]);
  peer_free (a);
  peer_free (b);
  peer_free (c);
}

/* A reload that lowers max_replies_per_connection holds for calls
 * between members once the caller has read what the daemon sent it at
 * the reload (here: before a round trip to the bus driver returns), and
 * one that raises it again makes room. */
static void
test_max_replies_reload (gconstpointer data)
{
  GQueue held = G_QUEUE_INIT;
  gchar *config;
  Peer *admin, *a, *b;

  if (reloading_address == NULL || reloading_config == NULL)
    {
      g_test_skip ("DBUS_MCAST_TEST_RELOADING_ADDRESS is not set");
      return;
    }
  admin = peer_new_on (PEER_CLASSIC, reloading_address);
  a = peer_new_on (PEER_MEMBER, reloading_address);
  b = peer_new_on (PEER_MEMBER, reloading_address);

  g_assert_true (g_file_get_contents (reloading_config, &config, NULL, NULL));
  reload_with (admin, config,
               "<limit name=\"max_replies_per_connection\">1</limit></busconfig>");
  peer_sync (a);

  call_held (a, b, "the one", &held);
  call_refused (a, b->name, -1);

  reload_with (admin, config, NULL);
  peer_sync (a);
  call_held (a, b, "room again", &held);
  answer_held (a, b, &held);

  g_free (config);
  peer_free (admin);
  peer_free (a);
  peer_free (b);
}

/* ---- monitors --------------------------------------------------------------- */

static void
poll_peers (Peer **peers,
            guint  n_peers,
            int    timeout_ms)
{
  struct pollfd fds[3];
  guint i;

  g_assert_cmpuint (n_peers, <=, G_N_ELEMENTS (fds));
  for (i = 0; i < n_peers; i++)
    {
      g_assert_true (dbus_connection_get_socket (peers[i]->dc, &fds[i].fd));
      fds[i].events = POLLIN;
      if (dbus_connection_has_messages_to_send (peers[i]->dc))
        fds[i].events |= POLLOUT;
      fds[i].revents = 0;
    }
  g_assert_cmpint (poll (fds, n_peers, timeout_ms), >=, 0);
  for (i = 0; i < n_peers; i++)
    g_assert_true (dbus_connection_read_write (peers[i]->dc, 0));
}

/* a makes n_calls calls to b (libdbus clients), at most window of them
 * unanswered at a time; b answers each.  What the monitor (if any)
 * receives meanwhile is appended to seen.  Returns whether every reply
 * arrived within timeout_us. */
static gboolean
exchange (Peer      *a,
          Peer      *b,
          guint      n_calls,
          guint      window,
          Peer      *monitor,
          GPtrArray *seen,
          gint64     timeout_us)
{
  gint64 deadline = g_get_monotonic_time () + timeout_us;
  Peer *peers[] = { a, b };
  guint sent = 0, answered = 0;

  while (answered < n_calls)
    {
      DBusMessage *m;

      for (; sent < n_calls && sent - answered < window; sent++)
        {
          m = new_call (b->name, "Echo", "exchange");
          g_assert_true (dbus_connection_send (a->dc, m, NULL));
          dbus_message_unref (m);
        }
      poll_peers (peers, G_N_ELEMENTS (peers), 100);
      while ((m = dbus_connection_pop_message (b->dc)) != NULL)
        {
          if (is_test_call (m, NULL))
            {
              DBusMessage *reply = dbus_message_new_method_return (m);

              g_assert_true (dbus_connection_send (b->dc, reply, NULL));
              dbus_message_unref (reply);
            }
          dbus_message_unref (m);
        }
      while ((m = dbus_connection_pop_message (a->dc)) != NULL)
        {
          if (dbus_message_get_type (m) == DBUS_MESSAGE_TYPE_METHOD_RETURN &&
              g_strcmp0 (dbus_message_get_sender (m), b->name) == 0)
            answered++;
          dbus_message_unref (m);
        }
      if (monitor != NULL)
        while ((m = peer_pop (monitor, 0)) != NULL)
          g_ptr_array_add (seen, m);
      if (g_get_monotonic_time () > deadline)
        {
          g_test_message ("exchange: %u of %u calls answered at the deadline", answered,
                          n_calls);
          return FALSE;
        }
    }
  return TRUE;
}

static void
kill_on_parent_death (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
}

/* 5000 calls and replies: far more than any socket buffer holds */
#define STALLED_CALLS 5000
/* An exchange that has not finished by then is blocked */
#define STALLED_DEADLINE_S 600

/* The next line dbus-monitor prints on @fd (non-blocking), or NULL at
 * the deadline; @pending keeps what came after it */
static gchar *
monitor_line (int      fd,
              GString *pending,
              gint64   deadline)
{
  for (;;)
    {
      gchar *nl = memchr (pending->str, '\n', pending->len);
      struct pollfd pfd = { fd, POLLIN, 0 };
      gchar buf[4096];
      gssize n;

      if (nl != NULL)
        {
          gchar *line = g_strndup (pending->str, nl - pending->str);

          g_string_erase (pending, 0, nl - pending->str + 1);
          return line;
        }
      if (g_get_monotonic_time () > deadline)
        return NULL;
      if (poll (&pfd, 1, 100) <= 0)
        continue;
      n = read (fd, buf, sizeof (buf));
      if (n == 0)
        return NULL;
      if (n > 0)
        g_string_append_len (pending, buf, n);
    }
}

/* A dbus-monitor that reads nothing (stopped, as in a debugger) does not
 * hold up an exchange between two members; once it runs again, it
 * prints every call and reply of the exchange.  How fast the exchange
 * goes meanwhile is the benchmark's (make bench, "stalled"). */
static void
test_monitor_stalled (gconstpointer data)
{
  gchar *tool = g_build_filename (g_getenv ("DBUS_MCAST_STAGE"), "bin", "dbus-monitor", NULL);
  gchar *argv[] = { tool, (gchar *) "--address", (gchar *) bus_address, NULL };
  GString *pending = g_string_new (NULL);
  GError *error = NULL;
  GPid pid;
  int out;
  gchar *line = NULL, *call, *reply;
  Peer *a = peer_new (PEER_MEMBER);
  Peer *b = peer_new (PEER_MEMBER);
  guint calls = 0, replies = 0;
  gint64 deadline;

  g_spawn_async_with_pipes (NULL, argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                            kill_on_parent_death, NULL, &pid, NULL, &out, NULL, &error);
  g_assert_no_error (error);
  g_assert_true (g_unix_set_fd_nonblocking (out, TRUE, NULL));
  /* it prints its NameLost when it has become a monitor */
  deadline = g_get_monotonic_time () + TIMEOUT_US;
  while (line == NULL || strstr (line, "NameLost") == NULL)
    {
      g_free (line);
      line = monitor_line (out, pending, deadline);
      g_assert_nonnull (line);
    }
  g_free (line);
  g_assert_cmpint (kill (pid, SIGSTOP), ==, 0);

  g_assert_true (exchange (a, b, STALLED_CALLS, 64, NULL, NULL,
                           STALLED_DEADLINE_S * G_USEC_PER_SEC));

  g_assert_cmpint (kill (pid, SIGCONT), ==, 0);
  call = g_strdup_printf ("sender=%s -> destination=%s", a->name, b->name);
  reply = g_strdup_printf ("sender=%s -> destination=%s", b->name, a->name);
  deadline = g_get_monotonic_time () + STALLED_DEADLINE_S * G_USEC_PER_SEC;
  while (calls < STALLED_CALLS || replies < STALLED_CALLS)
    {
      line = monitor_line (out, pending, deadline);
      if (line == NULL)
        g_error ("dbus-monitor printed %u calls and %u replies of %u", calls, replies,
                 STALLED_CALLS);
      if (g_str_has_prefix (line, "method call") && strstr (line, call) != NULL &&
          strstr (line, "member=Echo") != NULL)
        calls++;
      else if (g_str_has_prefix (line, "method return") && strstr (line, reply) != NULL)
        replies++;
      g_free (line);
    }

  kill (pid, SIGKILL);
  waitpid (pid, NULL, 0);
  g_spawn_close_pid (pid);
  close (out);
  g_free (call);
  g_free (reply);
  g_string_free (pending, TRUE);
  g_free (tool);
  peer_free (a);
  peer_free (b);
}

/* A call of the test, or a method return from data (a unique name) */
static gboolean
is_from_test_or_reply (DBusMessage *m, gconstpointer data)
{
  return is_test_call (m, NULL) ||
      (dbus_message_get_type (m) == DBUS_MESSAGE_TYPE_METHOD_RETURN &&
       g_strcmp0 (dbus_message_get_sender (m), data) == 0);
}

#define BURST_SIGNALS 400
#define BURST_PAYLOAD 1024

static gboolean
is_burst_from (DBusMessage *m, gconstpointer sender)
{
  return dbus_message_is_signal (m, TEST_IFACE, "Burst") &&
      g_strcmp0 (dbus_message_get_sender (m), sender) == 0;
}

/* Queues BURST_SIGNALS signals from p, numbered from 0, without writing
 * them */
static void
queue_burst (Peer *p)
{
  gchar *payload = g_strnfill (BURST_PAYLOAD, 'b');
  guint i;

  for (i = 0; i < BURST_SIGNALS; i++)
    {
      DBusMessage *m = new_signal (TEST_PATH, TEST_IFACE, "Burst", payload, i);

      g_assert_true (dbus_connection_send (p->dc, m, NULL));
      dbus_message_unref (m);
    }
  g_free (payload);
}

/* p received every signal of sender's burst, once, in order */
static void
assert_burst (Peer *p,
              Peer *sender)
{
  guint i;

  for (i = 0; i < BURST_SIGNALS; i++)
    {
      DBusMessage *m = peer_wait (p, is_burst_from, sender->name);

      g_assert_cmpuint (signal_seq (m), ==, i);
      dbus_message_unref (m);
    }
}

/* Two single-threaded members each queue a burst of signals for the
 * other and flush it before they look at what they received, while a
 * third member subscribed to both does not read at all: both flushes
 * return, as on a stock bus, and once they read, all three have every
 * signal in order. */
static void
test_flushing_pair (gconstpointer data)
{
  Peer *a = peer_new (PEER_MEMBER);
  Peer *b = peer_new (PEER_MEMBER);
  Peer *stalled = peer_new (PEER_MEMBER);
  gchar *rule;

  rule = g_strdup_printf ("type='signal',sender='%s',member='Burst'", a->name);
  peer_add_match (b, rule);
  peer_add_match (stalled, rule);
  g_free (rule);
  rule = g_strdup_printf ("type='signal',sender='%s',member='Burst'", b->name);
  peer_add_match (a, rule);
  peer_add_match (stalled, rule);
  g_free (rule);

  queue_burst (a);
  queue_burst (b);
  libdbus_flush (a->dc);
  libdbus_flush (b->dc);

  assert_burst (a, b);
  assert_burst (b, a);
  assert_burst (stalled, a);
  assert_burst (stalled, b);
  peer_free (stalled);
  peer_free (b);
  peer_free (a);
}

#define EAVESDROPPED_CALLS 1000

/* A member that eavesdrops on everything and does not read holds nobody
 * back; once it reads, it has every call and reply of the exchange it
 * overheard, in order */
static void
test_eavesdropper (gconstpointer data)
{
  Peer *a = peer_new (PEER_MEMBER);
  Peer *b = peer_new (PEER_MEMBER);
  Peer *eavesdropper = peer_new (PEER_MEMBER);
  dbus_uint32_t last_call = 0;
  guint calls = 0, replies = 0;

  peer_add_match (eavesdropper, "type='signal',eavesdrop=true");
  peer_add_match (eavesdropper, "type='method_call',eavesdrop=true");
  peer_add_match (eavesdropper, "type='method_return',eavesdrop=true");
  g_assert_true (exchange (a, b, EAVESDROPPED_CALLS, 64, NULL, NULL, TIMEOUT_US * 10));

  while (calls < EAVESDROPPED_CALLS || replies < EAVESDROPPED_CALLS)
    {
      DBusMessage *m = peer_wait (eavesdropper, is_from_test_or_reply, b->name);

      if (is_test_call (m, NULL))
        {
          g_assert_cmpstr (dbus_message_get_sender (m), ==, a->name);
          g_assert_cmpuint (dbus_message_get_serial (m), >, last_call);
          last_call = dbus_message_get_serial (m);
          calls++;
        }
      else
        {
          replies++;
        }
      g_assert_cmpuint (replies, <=, calls);
      dbus_message_unref (m);
    }

  peer_free (eavesdropper);
  peer_free (b);
  peer_free (a);
}

#define MONITORED_CALLS 500

/* A monitor that reads sees every message of an exchange, in order, the
 * kernel's: one the daemon serves (classic, or with rules) gets it from
 * the daemon's own member of the group */
static void
test_monitor_reading (gconstpointer data)
{
  /* "member-rules": a member that passes match rules */
  gboolean everything = strcmp (data, "member") == 0;
  Peer *a = peer_new (PEER_MEMBER);
  Peer *b = peer_new (PEER_MEMBER);
  Peer *monitor = peer_new (g_str_has_prefix (data, "member") ?
                            PEER_MEMBER : peer_kind_from_string (data));
  GPtrArray *seen = g_ptr_array_new_with_free_func ((GDestroyNotify) dbus_message_unref);
  gchar *rules[] = { g_strdup_printf ("sender='%s'", a->name),
                     g_strdup_printf ("sender='%s'", b->name) };
  gchar **rules_p = rules;
  dbus_uint32_t flags = 0;
  dbus_uint32_t last_call = 0;
  guint64 dispatched = 0;
  guint i, n = 0;

  /* A member that monitors everything is fed by the kernel; every other
   * monitor is served by the daemon (doc/design.md); the checks below only
   * look at the exchange anyway */
  dbus_message_unref (driver_call (monitor, "org.freedesktop.DBus.Monitoring", "BecomeMonitor",
                                   DBUS_TYPE_ARRAY, DBUS_TYPE_STRING, &rules_p,
                                   everything ? 0 : (int) G_N_ELEMENTS (rules),
                                   DBUS_TYPE_UINT32, &flags,
                                   DBUS_TYPE_INVALID));
  if (kernel_has_mcast ())
    dispatched = get_stat (a, "MessagesDispatched");
  g_assert_true (exchange (a, b, MONITORED_CALLS, 1, monitor, seen, TIMEOUT_US));
  /* the last messages may still be on their way to the monitor */
  for (i = 0; i < seen->len; i++)
    if (is_from_test_or_reply (g_ptr_array_index (seen, i), b->name))
      n++;
  for (; n < 2 * MONITORED_CALLS; n++)
    g_ptr_array_add (seen, peer_wait (monitor, is_from_test_or_reply, b->name));

  for (i = 0, n = 0; i < seen->len; i++)
    {
      DBusMessage *m = g_ptr_array_index (seen, i);

      if (!is_from_test_or_reply (m, b->name))
        continue;
      if (n % 2 == 0)
        {
          g_assert_true (is_test_call (m, NULL));
          g_assert_cmpstr (dbus_message_get_sender (m), ==, a->name);
          g_assert_cmpstr (dbus_message_get_destination (m), ==, b->name);
          g_assert_cmpuint (dbus_message_get_serial (m), >, last_call);
          last_call = dbus_message_get_serial (m);
        }
      else
        {
          g_assert_cmpint (dbus_message_get_type (m), ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
          g_assert_cmpstr (dbus_message_get_sender (m), ==, b->name);
          g_assert_cmpuint (dbus_message_get_reply_serial (m), ==, last_call);
        }
      n++;
    }
  g_assert_cmpuint (n, ==, 2 * MONITORED_CALLS);
  /* the exchange went through the group, monitored or not: a monitor the
   * daemon serves gets it from the daemon's own member */
  if (kernel_has_mcast ())
    assert_nothing_dispatched (a, dispatched);

  g_ptr_array_unref (seen);
  g_free (rules[0]);
  g_free (rules[1]);
  peer_free (monitor);
  peer_free (a);
  peer_free (b);
}

/* A member's burst of signals, sent without waiting: more than the
 * daemon's own member of the group holds, so the kernel diverts the rest
 * to the daemon's end of it.  A monitor the daemon serves sees every
 * signal once and in order, and the daemon dispatched none of them. */
static void
test_monitor_burst (gconstpointer data)
{
  Peer *emitter = peer_new (PEER_MEMBER);
  Peer *monitor = peer_new (peer_kind_from_string (data));
  guint64 dispatched = 0;

  become_monitor (monitor);
  if (kernel_has_mcast ())
    dispatched = get_stat (emitter, "MessagesDispatched");

  queue_burst (emitter);
  dbus_connection_flush (emitter->dc);
  assert_burst (monitor, emitter);

  if (kernel_has_mcast ())
    assert_nothing_dispatched (emitter, dispatched);

  peer_free (monitor);
  peer_free (emitter);
}

#define LEAVING_TOGETHER 16

/* Members that leave while the daemon is stopped: a member caller gets
 * stock's NoReply for its call to each, each error with a serial of its
 * own that the daemon numbers nothing else with (its next reply to the
 * caller has another), as stock numbers them; and a hand-made member sees
 * the daemon's private Departed signals name each departed member exactly
 * once, several to a signal, since the daemon noticed them together. */
static void
test_no_reply_together (gconstpointer data)
{
  Peer *caller = peer_new (PEER_MEMBER);
  Peer *leaving[LEAVING_TOGETHER];
  dbus_uint32_t serials[LEAVING_TOGETHER];
  GHashTable *left = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  GHashTable *error_serials = g_hash_table_new (NULL, NULL);
  const char *driver = DBUS_SERVICE_DBUS;
  dbus_uint32_t daemon_pid;
  guint i, n_signals = 0, n_errors = 0;
  DBusMcastCallTable *table;
  DBusMessage *m;
  Raw *r;

  if (!kernel_has_mcast ())
    {
      g_test_skip ("the kernel has no multicast AF_UNIX: the bus is classic");
      g_hash_table_unref (left);
      peer_free (caller);
      return;
    }

  /* The hand-made member lists a call to each of them, as a caller's
   * libdbus does: the daemon tells it who left */
  r = raw_new_with_table (bus_address, &table);
  for (i = 0; i < LEAVING_TOGETHER; i++)
    {
      leaving[i] = peer_new (PEER_MEMBER);
      table->calls[i].serial = 1000 + i;
      table->calls[i].peer = _dbus_mcast_sender_id_of_name (leaving[i]->name);
      m = new_call (leaving[i]->name, "Hang", NULL);
      serials[i] = peer_send (caller, m);
      dbus_message_unref (m);
      dbus_message_unref (peer_wait (leaving[i], is_test_call, NULL));
    }
  table->n_slots = LEAVING_TOGETHER;
  /* The daemon notices them all in one go */
  m = driver_call (caller, DBUS_INTERFACE_DBUS, "GetConnectionUnixProcessID",
                   DBUS_TYPE_STRING, &driver, DBUS_TYPE_INVALID);
  g_assert_true (dbus_message_get_args (m, NULL, DBUS_TYPE_UINT32, &daemon_pid,
                                        DBUS_TYPE_INVALID));
  dbus_message_unref (m);
  g_assert_cmpint (kill ((pid_t) daemon_pid, SIGSTOP), ==, 0);
  for (i = 0; i < LEAVING_TOGETHER; i++)
    peer_free (leaving[i]);
  g_usleep (100000);
  g_assert_cmpint (kill ((pid_t) daemon_pid, SIGCONT), ==, 0);

  while (g_hash_table_size (left) < LEAVING_TOGETHER)
    {
      DBusMessageIter args, entries;
      const char *name;

      m = raw_wait (r, is_departed, NULL);
      g_assert_cmpstr (dbus_message_get_signature (m), ==, DBUS_MCAST_DEPARTED_SIGNATURE);
      g_assert_cmpstr (dbus_message_get_sender (m), ==, DBUS_SERVICE_DBUS);
      g_assert_cmpstr (dbus_message_get_destination (m), ==, r->name);
      dbus_message_iter_init (m, &args);
      dbus_message_iter_recurse (&args, &entries);
      while (dbus_message_iter_get_arg_type (&entries) == DBUS_TYPE_STRING)
        {
          dbus_message_iter_get_basic (&entries, &name);
          g_assert_true (g_hash_table_add (left, g_strdup (name)));
          dbus_message_iter_next (&entries);
        }
      n_signals++;
      dbus_message_unref (m);
    }
  g_test_message ("%u departures came in %u Departed signals", LEAVING_TOGETHER,
                  n_signals);
  g_assert_cmpuint (n_signals, <, LEAVING_TOGETHER);

  while (n_errors < LEAVING_TOGETHER)
    {
      m = peer_wait (caller, is_no_reply, NULL);

      for (i = 0; i < LEAVING_TOGETHER; i++)
        if (dbus_message_get_reply_serial (m) == serials[i])
          {
            assert_no_reply (m, serials[i]);
            g_assert_true (g_hash_table_add (error_serials,
                                             GUINT_TO_POINTER (dbus_message_get_serial (m))));
            serials[i] = 0;
            n_errors++;
          }
      dbus_message_unref (m);
    }
  m = driver_call (caller, DBUS_INTERFACE_DBUS, "GetId", DBUS_TYPE_INVALID);
  g_assert_false (g_hash_table_contains (error_serials,
                                         GUINT_TO_POINTER (dbus_message_get_serial (m))));
  dbus_message_unref (m);

  munmap (table, sizeof (*table));
  raw_free (r);
  g_hash_table_unref (error_serials);
  g_hash_table_unref (left);
  peer_free (caller);
}

/* ---- main ------------------------------------------------------------------- */

int
main (int    argc,
      char **argv)
{
  static const gchar *kinds[] = { "member", "classic", "gdbus" };
  static const gchar *monitors[] = { "member", "member-rules", "classic", "gdbus" };
  static const gchar *triples_names[] = {
    "member-member-member", "member-member-gdbus", "member-gdbus-member",
    "gdbus-member-classic", "classic-member-gdbus", "gdbus-gdbus-gdbus",
    "classic-classic-classic"
  };
  static const gchar *triples_privacy[] = {
    "member-member-member", "gdbus-member-member", "member-member-gdbus",
    "member-gdbus-member", "classic-member-member"
  };
  /* emitter-subscriber-callee; GDBus reads in a thread of its own, so it
   * is never the subscriber that stops reading */
  static const gchar *triples_stalled[] = {
    "member-member-member", "classic-member-member", "gdbus-member-classic",
    "member-classic-member"
  };
  /* caller-callee; the callee does not read */
  static const gchar *pairs_limits[] = { "member-member", "classic-member", "member-classic" };
  static const gchar *pairs_replies[] = {
    "member-member", "member-classic", "member-gdbus", "classic-member"
  };
  static const gchar *libdbus_pairs[] = {
    "member-member", "member-classic", "classic-member", "classic-classic"
  };
  static const gchar *bad[] = { "garbage", "fields", "truncated", "body", "two-in-one",
                                "oversized", "empty" };
  guint i, j;

  g_test_init (&argc, &argv, NULL);
  bus_address = g_getenv ("DBUS_SESSION_BUS_ADDRESS");
  restricted_address = g_getenv ("DBUS_MCAST_TEST_RESTRICTED_ADDRESS");
  limited_address = g_getenv ("DBUS_MCAST_TEST_LIMITED_ADDRESS");
  small_address = g_getenv ("DBUS_MCAST_TEST_SMALL_ADDRESS");
  timed_address = g_getenv ("DBUS_MCAST_TEST_TIMED_ADDRESS");
  replies_address = g_getenv ("DBUS_MCAST_TEST_REPLIES_ADDRESS");
  reloading_address = g_getenv ("DBUS_MCAST_TEST_RELOADING_ADDRESS");
  reloading_config = g_getenv ("DBUS_MCAST_TEST_RELOADING_CONFIG");
  activatable_name = g_getenv ("DBUS_MCAST_TEST_ACTIVATABLE");
  slow_activatable_name = g_getenv ("DBUS_MCAST_TEST_SLOW_ACTIVATABLE");
  if (bus_address == NULL || g_getenv ("DBUS_MCAST_STAGE") == NULL)
    {
      g_printerr ("%s: run by test/bus/run, which starts the buses it tests "
                  "(DBUS_SESSION_BUS_ADDRESS, DBUS_MCAST_STAGE)\n", argv[0]);
      return 2;
    }

#define ADD(path, func, data) g_test_add_data_func (path, data, func)
#define ADDF(func, data, ...) \
  G_STMT_START { \
    gchar *p_ = g_strdup_printf (__VA_ARGS__); \
    g_test_add_data_func (p_, data, func); \
    g_free (p_); \
  } G_STMT_END

  ADD ("/promotion/member", test_promotion_member, NULL);
  ADD ("/promotion/classic", test_promotion_classic, NULL);
  ADD ("/bypass/method-calls", test_bypass, NULL);
  for (i = 0; i < G_N_ELEMENTS (kinds); i++)
    for (j = 0; j < G_N_ELEMENTS (kinds); j++)
      {
        gchar *pair = g_strdup_printf ("%s-%s", kinds[i], kinds[j]);

        /* the test data lives as long as the test suite */
        ADDF (test_calls, g_intern_string (pair), "/calls/%s", pair);
        ADDF (test_signals, g_intern_string (pair), "/signals/%s", pair);
        ADDF (test_large, g_intern_string (pair), "/large/%s", pair);
        ADDF (test_no_reply, g_intern_string (pair), "/no-reply/disconnect/%s", pair);
        g_free (pair);
      }
  for (i = 0; i < G_N_ELEMENTS (kinds); i++)
    {
      ADDF (test_no_such_name, kinds[i], "/calls/no-such-name/%s", kinds[i]);
      ADDF (test_activation, kinds[i], "/activation/%s", kinds[i]);
    }
  ADD ("/activation/sender-goes-on", test_activation_sender_goes_on, NULL);
  for (i = 0; i < G_N_ELEMENTS (triples_names); i++)
    ADDF (test_names, triples_names[i], "/names/%s", triples_names[i]);
  ADD ("/names/recompile", test_names_recompile, NULL);
  ADD ("/names/hand-over/members", test_hand_over, NULL);
  ADD ("/names/hand-over/from-nobody", test_hand_over_from_nobody, NULL);
  ADD ("/names/hand-over/from-classic/release", test_hand_over_from_classic, "release");
  ADD ("/names/hand-over/from-classic/leave", test_hand_over_from_classic, "leave");
  ADD ("/no-reply/disconnect/monitored/member-member", test_no_reply_monitored,
       "member-member");
  ADD ("/no-reply/disconnect/together", test_no_reply_together, NULL);
  ADD ("/no-reply/departed-to-callers", test_departed_to_callers, NULL);
  ADD ("/limits/calls-beyond-table", test_calls_beyond_table, NULL);
  ADD ("/no-reply/monitor-later/read", test_no_reply_monitor_later, "read");
  ADD ("/no-reply/monitor-later/unread", test_no_reply_monitor_later, "unread");
  ADD ("/no-reply/monitor-later/unsent-reply", test_no_reply_monitor_later_unsent, NULL);
  ADD ("/no-reply/monitor-later/unnamed-callee", test_no_reply_monitor_later_unnamed, NULL);
  ADD ("/no-reply/name-moved/members", test_no_reply_name_moved,
       "member-member-member");
  ADD ("/no-reply/name-moved/classic", test_no_reply_name_moved,
       "classic-classic-classic");
  ADD ("/no-reply/name-moved/monitored", test_no_reply_name_moved_monitored,
       NULL);
  ADD ("/no-reply/name-moved/member-gdbus", test_no_reply_name_moved,
       "member-gdbus-gdbus");
  for (i = 0; i < G_N_ELEMENTS (kinds); i++)
    {
      ADDF (test_add_match_order, kinds[i], "/order/add-match/%s", kinds[i]);
      ADDF (test_request_name_order, kinds[i], "/order/request-name/%s", kinds[i]);
    }
  ADD ("/order/full-member", test_full_member_order, NULL);
  ADD ("/order/causal/classic", test_causal_order, "classic");
  ADD ("/order/causal/gdbus", test_causal_order, "gdbus");
  ADD ("/order/causal/monitored", test_causal_order, "monitored");
  ADD ("/order/one-step", test_one_step, NULL);
  ADD ("/self/member", test_self, "member");
  ADD ("/self/classic", test_self, "classic");
  for (i = 0; i < G_N_ELEMENTS (libdbus_pairs); i++)
    {
      ADDF (test_fd_passing, libdbus_pairs[i], "/fd-passing/%s", libdbus_pairs[i]);
      ADDF (test_order, libdbus_pairs[i], "/order/%s", libdbus_pairs[i]);
      ADDF (test_byte_order, libdbus_pairs[i], "/byte-order/%s", libdbus_pairs[i]);
      ADDF (test_reused_serial, libdbus_pairs[i], "/reused-serial/%s", libdbus_pairs[i]);
    }
  for (i = 0; i < G_N_ELEMENTS (triples_privacy); i++)
    ADDF (test_unicast_privacy, triples_privacy[i], "/security/unicast-privacy/%s",
          triples_privacy[i]);
  ADD ("/large/lookalike/member-member", test_large_lookalike, "member-member");
  ADD ("/large/lookalike/member-classic", test_large_lookalike, "member-classic");
  ADD ("/security/raw/promotion", test_raw_promotion, NULL);
  for (i = 0; i < G_N_ELEMENTS (kinds); i++)
    {
      ADDF (test_forged_sender, kinds[i], "/security/raw/forged-sender/%s", kinds[i]);
    }
  ADD ("/security/raw/misspelt-sender", test_misspelt_sender, NULL);
  ADD ("/security/raw/spoofed-service/exact", test_spoofed_service, "exact");
  ADD ("/security/raw/spoofed-service/loose", test_spoofed_service, "loose");
  for (i = 0; i < G_N_ELEMENTS (bad); i++)
    ADDF (test_bad_packets, GINT_TO_POINTER (i), "/security/raw/bad-packet/%s", bad[i]);
  ADD ("/security/raw/filter-tamper", test_filter_tamper, NULL);
  ADD ("/security/raw/unsolicited-reply/unique", test_unsolicited_reply, "unique");
  ADD ("/security/raw/unsolicited-reply/well-known", test_unsolicited_reply, "well-known");
  ADD ("/security/raw/forged-departed", test_forged_departed, NULL);
  ADD ("/security/raw/lying-calls-table", test_lying_calls_table, NULL);
  ADD ("/policy/restricted", test_restricted, NULL);
  ADD ("/limits/max-message-size", test_small_messages, NULL);
  ADD ("/limits/reply-timeout", test_reply_timeout, NULL);
  ADD ("/limits/reload-before-hello", test_reload_before_hello, NULL);
  for (i = 0; i < G_N_ELEMENTS (pairs_replies); i++)
    ADDF (test_max_replies, pairs_replies[i], "/limits/max-replies/%s", pairs_replies[i]);
  ADD ("/limits/max-replies-mixed", test_max_replies_mixed, NULL);
  ADD ("/limits/max-replies-reload", test_max_replies_reload, NULL);
  ADD ("/security/raw/call-without-sender", test_call_without_sender, NULL);
  ADD ("/security/raw/direct-spoofed-sender", test_direct_spoofed_sender, NULL);
  for (i = 0; i < G_N_ELEMENTS (triples_stalled); i++)
    ADDF (test_stalled_subscriber, triples_stalled[i], "/isolation/stalled-subscriber/%s",
          triples_stalled[i]);
  for (i = 0; i < G_N_ELEMENTS (pairs_limits); i++)
    ADDF (test_limits, pairs_limits[i], "/isolation/limits/%s", pairs_limits[i]);
  ADD ("/isolation/flushing-pair", test_flushing_pair, NULL);
  ADD ("/isolation/eavesdropper", test_eavesdropper, NULL);
  ADD ("/monitor/stalled", test_monitor_stalled, NULL);
  ADD ("/security/raw/monitor-sends", test_monitor_sends, NULL);
  for (i = 0; i < G_N_ELEMENTS (monitors); i++)
    ADDF (test_monitor_reading, monitors[i], "/monitor/reading/%s", monitors[i]);
  ADD ("/monitor/burst/classic", test_monitor_burst, "classic");
  ADD ("/monitor/burst/gdbus", test_monitor_burst, "gdbus");

  return g_test_run ();
}
