/* test/internals/mcast-filter.c  The match-to-BPF compiler (bus/mcast-filter.c)
 * on a stock kernel.
 *
 * Every test compiles a program, attaches it with SO_ATTACH_FILTER to the
 * receiving end of a socketpair (AF_UNIX, SOCK_SEQPACKET) and sends real
 * D-Bus messages (marshalled by libdbus, or built byte by byte for
 * malformed and big-endian ones) through the pair: the kernel runs the
 * program, and the test checks which messages arrive.
 *
 * Match rules are built directly as DBusMatchRule structs (the parser is a
 * separate module), by rule_new() from key/value pairs.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>

#include <dbus/dbus.h>
#include <dbus/dbus-match-rule.h>
#include <dbus/dbus-mcast-uapi.h>
#include <dbus/dbus-seqpacket-io.h>
#include "bus/mcast-filter.h"

#include <glib.h>

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- Rules -------------------------------------------------------------- */

static GPtrArray *all_rules;

static void
rule_free (gpointer p)
{
  DBusMatchRule *rule = p;
  int i;

  g_free (rule->interface);
  g_free (rule->member);
  g_free (rule->sender);
  g_free (rule->destination);
  g_free (rule->path);
  for (i = 0; i < rule->args_len; i++)
    g_free (rule->args[i]);
  g_free (rule->args);
  g_free (rule->arg_lens);
  g_free (rule);
}

static void
rule_set_arg (DBusMatchRule *rule,
              int            n,
              const char    *value,
              unsigned int   how)
{
  if (n >= rule->args_len)
    {
      rule->args = g_renew (char *, rule->args, n + 1);
      rule->arg_lens = g_renew (unsigned int, rule->arg_lens, n + 1);
      for (; rule->args_len <= n; rule->args_len++)
        {
          rule->args[rule->args_len] = NULL;
          rule->arg_lens[rule->args_len] = 0;
        }
    }
  rule->args[n] = g_strdup (value);
  rule->arg_lens[n] = strlen (value) | how;
  rule->flags |= DBUS_MATCH_ARGS;
}

/* rule_new ("type", "signal", "sender", ":1.5", ..., NULL): the keys of
 * the match rule syntax, filled in as dbus/dbus-match-rule.h documents;
 * freed at the end of the test program. */
static DBusMatchRule *
rule_new (const char *key,
          ...)
{
  DBusMatchRule *rule = g_new0 (DBusMatchRule, 1);
  va_list ap;

  rule->refcount = 1;
  va_start (ap, key);
  for (; key != NULL; key = va_arg (ap, const char *))
    {
      const char *value = va_arg (ap, const char *);

      if (strcmp (key, "type") == 0)
        {
          rule->flags |= DBUS_MATCH_MESSAGE_TYPE;
          rule->message_type = dbus_message_type_from_string (value);
        }
      else if (strcmp (key, "sender") == 0)
        {
          rule->flags |= DBUS_MATCH_SENDER;
          rule->sender = g_strdup (value);
        }
      else if (strcmp (key, "interface") == 0)
        {
          rule->flags |= DBUS_MATCH_INTERFACE;
          rule->interface = g_strdup (value);
        }
      else if (strcmp (key, "member") == 0)
        {
          rule->flags |= DBUS_MATCH_MEMBER;
          rule->member = g_strdup (value);
        }
      else if (strcmp (key, "path") == 0)
        {
          rule->flags |= DBUS_MATCH_PATH;
          rule->path = g_strdup (value);
        }
      else if (strcmp (key, "path_namespace") == 0)
        {
          rule->flags |= DBUS_MATCH_PATH_NAMESPACE;
          rule->path = g_strdup (value);
        }
      else if (strcmp (key, "destination") == 0)
        {
          rule->flags |= DBUS_MATCH_DESTINATION;
          rule->destination = g_strdup (value);
        }
      else if (strcmp (key, "eavesdrop") == 0)
        {
          if (strcmp (value, "true") == 0)
            rule->flags |= DBUS_MATCH_CLIENT_IS_EAVESDROPPING;
        }
      else if (strcmp (key, "arg0namespace") == 0)
        {
          rule_set_arg (rule, 0, value, DBUS_MATCH_ARG_NAMESPACE);
        }
      else if (g_str_has_prefix (key, "arg"))
        {
          char *end;
          long n = strtol (key + 3, &end, 10);

          g_assert_true (end != key + 3 && n >= 0 && n < 64);
          if (strcmp (end, "path") == 0)
            rule_set_arg (rule, n, value, DBUS_MATCH_ARG_IS_PATH);
          else
            {
              g_assert_cmpstr (end, ==, "");
              rule_set_arg (rule, n, value, 0);
            }
        }
      else
        {
          g_error ("unknown match key %s", key);
        }
    }
  va_end (ap);
  g_ptr_array_add (all_rules, rule);
  return rule;
}

/* ---- Programs and a socket pair running them ---------------------------- */

typedef struct
{
  int sv[2];                /* send on 0, the filter is on 1 */
  BusMcastProgram program;
} Pair;

static void
pair_attach (Pair           *pair,
             BusMcastFilter *filter)
{
  DBusError error = DBUS_ERROR_INIT;
  struct sock_fprog fprog;
  int sndbuf = 256 * 1024;
  unsigned int i;

  if (!bus_mcast_filter_compile (filter, &pair->program, &error))
    g_error ("compile: %s: %s", error.name, error.message);
  g_assert_cmpuint (pair->program.len, >, 0);
  g_assert_cmpuint (pair->program.len, <=, BPF_MAXINSNS);

  g_assert_cmpint (socketpair (AF_UNIX, SOCK_SEQPACKET, 0, pair->sv), ==, 0);
  g_assert_cmpint (setsockopt (pair->sv[0], SOL_SOCKET, SO_SNDBUF,
                               &sndbuf, sizeof (sndbuf)), ==, 0);
  /* A socket filter keeps as many bytes as it returns: the daemon's
   * "only if no member claimed it" keeps one here, for
   * pair_passes_unclaimed() to tell */
  fprog.len = pair->program.len;
  fprog.filter = g_memdup2 (pair->program.insns,
                            pair->program.len * sizeof (struct sock_filter));
#ifdef DBUS_HAVE_MCAST_UAPI
  for (i = 0; i < fprog.len; i++)
    if (fprog.filter[i].code == (BPF_RET | BPF_K) &&
        fprog.filter[i].k == UNIX_COPY_UNCLAIMED)
      fprog.filter[i].k = 1;
#endif
  if (setsockopt (pair->sv[1], SOL_SOCKET, SO_ATTACH_FILTER,
                  &fprog, sizeof (fprog)) != 0)
    g_error ("SO_ATTACH_FILTER (%u instructions): %s", pair->program.len,
             g_strerror (errno));
  g_free (fprog.filter);
}

static Pair *
pair_new (BusMcastFilter *filter)
{
  Pair *pair = g_new0 (Pair, 1);

  pair_attach (pair, filter);
  return pair;
}

static void
pair_free (Pair *pair)
{
  close (pair->sv[0]);
  close (pair->sv[1]);
  bus_mcast_program_clear (&pair->program);
  g_free (pair);
}

/* How many of @len bytes the filter lets through: 0, all, or 1 for a
 * copy only if no member claimed it (pair_attach()) */
static gsize
pair_run (Pair          *pair,
          const guint8  *data,
          gsize          len)
{
  static guint8 buf[70000];
  ssize_t n;

  g_assert_cmpint (send (pair->sv[0], data, len, 0), ==, (ssize_t) len);
  n = recv (pair->sv[1], buf, sizeof (buf), MSG_DONTWAIT);
  if (n < 0)
    {
      g_assert_cmpint (errno, ==, EAGAIN);
      return 0;
    }
  g_assert_true (n == 1 || n == (ssize_t) len);
  g_assert_true (memcmp (buf, data, n) == 0);
  return n;
}

/* Whether the filter lets @len bytes through (whole) */
static gboolean
pair_passes (Pair          *pair,
             const guint8  *data,
             gsize          len)
{
  return pair_run (pair, data, len) == len;
}

/* How much of @message the filter lets through (pair_run()) */
static gsize
pair_run_message (Pair        *pair,
                  DBusMessage *message,
                  gsize       *len)
{
  char *data;
  int n;
  gsize kept;

  if (dbus_message_get_serial (message) == 0)
    dbus_message_set_serial (message, 7);
  g_assert_true (dbus_message_marshal (message, &data, &n));
  *len = n;
  kept = pair_run (pair, (const guint8 *) data, n);
  dbus_free (data);
  dbus_message_unref (message);
  return kept;
}

static gboolean
pair_passes_message (Pair        *pair,
                     DBusMessage *message)
{
  gsize len;

  return pair_run_message (pair, message, &len) == len;
}

/* Whether the daemon's filter gives it @message only if no member
 * claimed it */
static gboolean
pair_passes_unclaimed (Pair        *pair,
                       DBusMessage *message)
{
  gsize len;

  return pair_run_message (pair, message, &len) == 1;
}

/* ---- Messages ----------------------------------------------------------- */

static DBusMessage *
signal_new (const char *sender,
            const char *path,
            const char *iface,
            const char *member,
            const char *destination)
{
  DBusMessage *m = dbus_message_new_signal (path, iface, member);

  g_assert_nonnull (m);
  if (sender != NULL)
    g_assert_true (dbus_message_set_sender (m, sender));
  if (destination != NULL)
    g_assert_true (dbus_message_set_destination (m, destination));
  return m;
}

static DBusMessage *
call_new (const char *sender,
          const char *destination)
{
  DBusMessage *m = dbus_message_new_method_call (destination, "/org/example/obj",
                                                 "org.example.Iface", "Call");

  g_assert_nonnull (m);
  if (sender != NULL)
    g_assert_true (dbus_message_set_sender (m, sender));
  return m;
}

static DBusMessage *
reply_new (int         type,
           const char *sender,
           const char *destination)
{
  DBusMessage *m = dbus_message_new (type);

  g_assert_nonnull (m);
  dbus_message_set_reply_serial (m, 3);
  if (type == DBUS_MESSAGE_TYPE_ERROR)
    g_assert_true (dbus_message_set_error_name (m, "org.example.Error"));
  g_assert_true (dbus_message_set_sender (m, sender));
  g_assert_true (dbus_message_set_destination (m, destination));
  return m;
}

static DBusMessage *
with_string_args (DBusMessage *m,
                  int          type,
                  const char  *arg0,
                  const char  *arg1)
{
  g_assert_true (dbus_message_append_args (m, type, &arg0,
                                           arg1 != NULL ? DBUS_TYPE_STRING
                                           : DBUS_TYPE_INVALID,
                                           &arg1, DBUS_TYPE_INVALID));
  return m;
}

/* A standard broadcast signal */
static DBusMessage *
broadcast (const char *sender)
{
  return signal_new (sender, "/org/example/obj", "org.example.Iface",
                     "Changed", NULL);
}

/* ---- Hand-made messages ------------------------------------------------- */

/* A message built byte by byte, in either byte order, with any field */
typedef struct
{
  GByteArray *bytes;
  gboolean big;
} Raw;

static void
raw_pad (Raw  *raw,
         guint align)
{
  static const guint8 zero[8] = { 0 };

  g_byte_array_append (raw->bytes, zero,
                       (align - raw->bytes->len % align) % align);
}

static void
raw_u32 (Raw     *raw,
         guint32  v)
{
  guint32 w = raw->big ? GUINT32_TO_BE (v) : GUINT32_TO_LE (v);

  g_byte_array_append (raw->bytes, (const guint8 *) &w, 4);
}

static void
raw_put_u32 (Raw     *raw,
             guint    offset,
             guint32  v)
{
  guint32 w = raw->big ? GUINT32_TO_BE (v) : GUINT32_TO_LE (v);

  memcpy (raw->bytes->data + offset, &w, 4);
}

static Raw *
raw_new (gboolean big,
         guint8   type)
{
  Raw *raw = g_new0 (Raw, 1);
  guint8 fixed[4] = { big ? 'B' : 'l', type, 0, 1 };

  raw->big = big;
  raw->bytes = g_byte_array_new ();
  g_byte_array_append (raw->bytes, fixed, 4);
  raw_u32 (raw, 0);     /* body length */
  raw_u32 (raw, 5);     /* serial */
  raw_u32 (raw, 0);     /* field array length */
  return raw;
}

/* A string-like field (s, o) or a signature (g) */
static void
raw_field_string (Raw        *raw,
                  guint8      code,
                  char        type,
                  const char *value)
{
  guint8 head[4] = { code, 1, (guint8) type, 0 };
  gsize len = strlen (value);

  raw_pad (raw, 8);
  g_byte_array_append (raw->bytes, head, 4);
  if (type == 'g')
    {
      guint8 l = len;

      g_byte_array_append (raw->bytes, &l, 1);
    }
  else
    {
      raw_u32 (raw, len);
    }
  g_byte_array_append (raw->bytes, (const guint8 *) value, len + 1);
}

static void
raw_field_u32 (Raw     *raw,
               guint8   code,
               char     type,
               guint32  value)
{
  guint8 head[4] = { code, 1, (guint8) type, 0 };

  raw_pad (raw, 8);
  g_byte_array_append (raw->bytes, head, 4);
  raw_u32 (raw, value);
}

/* Ends the field array, appends @body and fills in the lengths; returns
 * the bytes (free with g_byte_array_unref) */
static GByteArray *
raw_finish (Raw          *raw,
            const guint8 *body,
            gsize         body_len)
{
  GByteArray *bytes = raw->bytes;

  raw_put_u32 (raw, 12, bytes->len - 16);
  raw_pad (raw, 8);
  g_byte_array_append (bytes, body, body_len);
  raw_put_u32 (raw, 4, body_len);
  g_free (raw);
  return bytes;
}

/* A signal with PATH, INTERFACE, MEMBER, SENDER (and DESTINATION) */
static Raw *
raw_signal (gboolean    big,
            const char *sender,
            const char *destination)
{
  Raw *raw = raw_new (big, DBUS_MESSAGE_TYPE_SIGNAL);

  raw_field_string (raw, DBUS_HEADER_FIELD_PATH, 'o', "/org/example/obj");
  raw_field_string (raw, DBUS_HEADER_FIELD_INTERFACE, 's', "org.example.Iface");
  raw_field_string (raw, DBUS_HEADER_FIELD_MEMBER, 's', "Changed");
  raw_field_string (raw, DBUS_HEADER_FIELD_SENDER, 's', sender);
  if (destination != NULL)
    raw_field_string (raw, DBUS_HEADER_FIELD_DESTINATION, 's', destination);
  return raw;
}

static gboolean
bytes_valid (const guint8 *data,
             gsize         len)
{
  DBusError error = DBUS_ERROR_INIT;
  DBusMessage *m = dbus_message_demarshal ((const char *) data, len, &error);

  if (m == NULL)
    {
      dbus_error_free (&error);
      return FALSE;
    }
  dbus_message_unref (m);
  return TRUE;
}

static gboolean
pair_passes_raw (Pair       *pair,
                 GByteArray *bytes)
{
  gboolean passes = pair_passes (pair, bytes->data, bytes->len);

  g_byte_array_unref (bytes);
  return passes;
}

/* ---- Tests -------------------------------------------------------------- */

static BusMcastFilter *
member_new (const char *name,
            ...)
{
  BusMcastFilter *filter = bus_mcast_filter_new (BUS_MCAST_FILTER_MEMBER);
  va_list ap;

  g_assert_nonnull (filter);
  va_start (ap, name);
  for (; name != NULL; name = va_arg (ap, const char *))
    g_assert_true (bus_mcast_filter_add_name (filter, name));
  va_end (ap);
  return filter;
}

static void
add_rule (BusMcastFilter *filter,
          DBusMatchRule  *rule,
          const char     *owner)
{
  g_assert_true (bus_mcast_filter_add_rule (filter, rule, owner));
}

static void
test_member_destination (void)
{
  BusMcastFilter *filter = member_new (":1.1", "org.example.Name",
                                       "org.example.Name", NULL);
  Pair *p = pair_new (filter);
  const char *others[] = { ":1.10", ":1.11", ":1.1.1", ":1.1a", ":1.2",
                           ":2.1", "org.example.Nam", "org.example.Names",
                           "org.example.NamE", "Org.example.Name",
                           "org.example.Name.x" };
  /* not even valid names, by hand */
  const char *invalid[] = { ":1.", ":1", ":1.1 ", ":1.1\n", "" };
  gsize i;

  g_assert_cmpint (p->program.precision, ==, BUS_MCAST_PRECISION_EXACT);
  g_test_message ("member filter with 2 names, no rules: %u instructions",
                  p->program.len);

  g_assert_true (pair_passes_message (p, call_new (":1.5", ":1.1")));
  g_assert_true (pair_passes_message (p, call_new (":1.5", "org.example.Name")));
  g_assert_true (pair_passes_message (p, signal_new (":1.5", "/a", "a.b", "C",
                                                     ":1.1")));
  g_assert_true (pair_passes_message (p, reply_new (DBUS_MESSAGE_TYPE_METHOD_RETURN,
                                                    ":1.5", ":1.1")));
  g_assert_true (pair_passes_message (p, reply_new (DBUS_MESSAGE_TYPE_ERROR,
                                                    ":1.5", ":1.1")));
  for (i = 0; i < G_N_ELEMENTS (others); i++)
    {
      g_assert_false (pair_passes_message (p, call_new (":1.5", others[i])));
      g_assert_false (pair_passes_message (p, reply_new (DBUS_MESSAGE_TYPE_ERROR,
                                                         ":1.5", others[i])));
    }
  for (i = 0; i < G_N_ELEMENTS (invalid); i++)
    g_assert_false (pair_passes_raw (p, raw_finish (raw_signal (FALSE, ":1.5",
                                                                invalid[i]),
                                                    NULL, 0)));
  g_assert_true (pair_passes_raw (p, raw_finish (raw_signal (FALSE, ":1.5", ":1.1"),
                                                 NULL, 0)));
  /* without destination: a method call is for the bus driver */
  g_assert_false (pair_passes_message (p, call_new (":1.5", NULL)));
  /* no rules: no broadcast */
  g_assert_false (pair_passes_message (p, broadcast (":1.5")));

  pair_free (p);
  bus_mcast_filter_free (filter);
}

static void
test_member_unicast_to_others (void)
{
  BusMcastFilter *filter = member_new (":1.1", NULL);
  Pair *p;

  /* rules that match every signal, from anyone, with any key */
  add_rule (filter, rule_new ("type", "signal", NULL), NULL);
  add_rule (filter, rule_new (NULL, NULL), NULL);
  add_rule (filter, rule_new ("interface", "org.example.Iface", NULL), NULL);
  p = pair_new (filter);
  g_test_message ("member filter matching every signal: %u instructions",
                  p->program.len);

  g_assert_true (pair_passes_message (p, broadcast (":1.5")));
  g_assert_false (pair_passes_message (p, signal_new (":1.5", "/org/example/obj",
                                                      "org.example.Iface",
                                                      "Changed", ":1.99")));
  g_assert_false (pair_passes_message (p, call_new (":1.5", ":1.10")));
  g_assert_false (pair_passes_message (p, call_new (":1.5", NULL)));
  g_assert_true (pair_passes_message (p, call_new (":1.5", ":1.1")));

  pair_free (p);
  bus_mcast_filter_free (filter);
}

/* One rule on a member with no broadcast rule otherwise: whether each of
 * the given messages passes */
static Pair *
member_with_rule (DBusMatchRule *rule,
                  const char    *owner)
{
  BusMcastFilter *filter = member_new (":1.1", NULL);
  Pair *p;

  add_rule (filter, rule, owner);
  p = pair_new (filter);
  bus_mcast_filter_free (filter);
  return p;
}

static void
test_member_keys (void)
{
  Pair *p;

  /* type: only signals are broadcast; a rule for calls matches none */
  p = member_with_rule (rule_new ("type", "signal", NULL), NULL);
  g_assert_true (pair_passes_message (p, broadcast (":1.5")));
  pair_free (p);
  p = member_with_rule (rule_new ("type", "method_call", NULL), NULL);
  g_assert_false (pair_passes_message (p, broadcast (":1.5")));
  pair_free (p);

  /* sender, unique */
  p = member_with_rule (rule_new ("sender", ":1.5", NULL), NULL);
  g_assert_true (pair_passes_message (p, broadcast (":1.5")));
  g_assert_false (pair_passes_message (p, broadcast (":1.50")));
  g_assert_false (pair_passes_message (p, broadcast (":1.6")));
  g_assert_false (pair_passes_message (p, broadcast (NULL)));
  pair_free (p);

  /* sender, well-known: compared with its owner */
  p = member_with_rule (rule_new ("sender", "org.example.Owner", NULL), ":1.7");
  g_assert_true (pair_passes_message (p, broadcast (":1.7")));
  g_assert_false (pair_passes_message (p, broadcast (":1.5")));
  g_assert_false (pair_passes_message (p, broadcast ("org.example.Owner")));
  pair_free (p);
  p = member_with_rule (rule_new ("sender", "org.example.Owner", NULL), NULL);
  g_assert_false (pair_passes_message (p, broadcast (":1.7")));
  g_assert_false (pair_passes_message (p, broadcast ("org.example.Owner")));
  pair_free (p);

  /* interface, member, path */
  p = member_with_rule (rule_new ("interface", "org.example.Iface", NULL), NULL);
  g_assert_true (pair_passes_message (p, broadcast (":1.5")));
  g_assert_false (pair_passes_message (p, signal_new (":1.5", "/a", "org.example.Ifac",
                                                      "Changed", NULL)));
  g_assert_false (pair_passes_message (p, signal_new (":1.5", "/a", "org.example.Iface2",
                                                      "Changed", NULL)));
  pair_free (p);
  p = member_with_rule (rule_new ("member", "Changed", NULL), NULL);
  g_assert_true (pair_passes_message (p, broadcast (":1.5")));
  g_assert_false (pair_passes_message (p, signal_new (":1.5", "/a", "a.b",
                                                      "Change", NULL)));
  g_assert_false (pair_passes_message (p, signal_new (":1.5", "/a", "a.b",
                                                      "Changes", NULL)));
  pair_free (p);
  p = member_with_rule (rule_new ("path", "/org/example/obj", NULL), NULL);
  g_assert_true (pair_passes_message (p, broadcast (":1.5")));
  g_assert_false (pair_passes_message (p, signal_new (":1.5", "/org/example/obj/x",
                                                      "a.b", "C", NULL)));
  g_assert_false (pair_passes_message (p, signal_new (":1.5", "/org/example/ob",
                                                      "a.b", "C", NULL)));
  pair_free (p);

  /* path_namespace */
  p = member_with_rule (rule_new ("path_namespace", "/org/example", NULL), NULL);
  g_assert_true (pair_passes_message (p, signal_new (":1.5", "/org/example",
                                                     "a.b", "C", NULL)));
  g_assert_true (pair_passes_message (p, signal_new (":1.5", "/org/example/obj",
                                                     "a.b", "C", NULL)));
  g_assert_false (pair_passes_message (p, signal_new (":1.5", "/org/examples",
                                                      "a.b", "C", NULL)));
  g_assert_false (pair_passes_message (p, signal_new (":1.5", "/org/exampl",
                                                      "a.b", "C", NULL)));
  g_assert_false (pair_passes_message (p, signal_new (":1.5", "/org", "a.b", "C",
                                                      NULL)));
  pair_free (p);
  p = member_with_rule (rule_new ("path_namespace", "/", NULL), NULL);
  g_assert_true (pair_passes_message (p, signal_new (":1.5", "/", "a.b", "C", NULL)));
  g_assert_true (pair_passes_message (p, broadcast (":1.5")));
  pair_free (p);

  /* destination: a broadcast has none, so such a rule matches none */
  p = member_with_rule (rule_new ("destination", ":1.1", NULL), NULL);
  g_assert_false (pair_passes_message (p, broadcast (":1.5")));
  pair_free (p);

  /* arg0: strings only */
  p = member_with_rule (rule_new ("arg0", "org.example.Name", NULL), NULL);
  g_assert_cmpint (p->program.precision, ==, BUS_MCAST_PRECISION_EXACT);
  g_assert_true (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                           DBUS_TYPE_STRING,
                                                           "org.example.Name",
                                                           "x")));
  g_assert_false (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                            DBUS_TYPE_STRING,
                                                            "org.example.Nam",
                                                            NULL)));
  g_assert_false (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                            DBUS_TYPE_STRING,
                                                            "org.example.Names",
                                                            NULL)));
  g_assert_false (pair_passes_message (p, broadcast (":1.5")));
  pair_free (p);
  p = member_with_rule (rule_new ("arg0", "", NULL), NULL);
  g_assert_true (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                           DBUS_TYPE_STRING,
                                                           "", NULL)));
  g_assert_false (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                            DBUS_TYPE_STRING,
                                                            "a", NULL)));
  g_assert_false (pair_passes_message (p, broadcast (":1.5")));
  pair_free (p);
  p = member_with_rule (rule_new ("arg0", "/a", NULL), NULL);
  g_assert_false (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                            DBUS_TYPE_OBJECT_PATH,
                                                            "/a", NULL)));
  pair_free (p);

  /* arg0namespace */
  p = member_with_rule (rule_new ("arg0namespace", "org.example", NULL), NULL);
  g_assert_true (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                           DBUS_TYPE_STRING,
                                                           "org.example", NULL)));
  g_assert_true (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                           DBUS_TYPE_STRING,
                                                           "org.example.Name", NULL)));
  g_assert_false (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                            DBUS_TYPE_STRING,
                                                            "org.examples", NULL)));
  g_assert_false (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                            DBUS_TYPE_STRING,
                                                            "org", NULL)));
  pair_free (p);

  /* arg0path: strings and object paths, prefixes at slashes both ways */
  p = member_with_rule (rule_new ("arg0path", "/aa/bb/", NULL), NULL);
  g_assert_true (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                           DBUS_TYPE_STRING,
                                                           "/aa/bb/", NULL)));
  g_assert_true (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                           DBUS_TYPE_OBJECT_PATH,
                                                           "/aa/bb/cc", NULL)));
  g_assert_true (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                           DBUS_TYPE_STRING,
                                                           "/aa/", NULL)));
  g_assert_true (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                           DBUS_TYPE_STRING,
                                                           "/", NULL)));
  g_assert_false (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                            DBUS_TYPE_STRING,
                                                            "/aa", NULL)));
  g_assert_false (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                            DBUS_TYPE_STRING,
                                                            "/aa/bc/", NULL)));
  g_assert_false (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                            DBUS_TYPE_OBJECT_PATH,
                                                            "/ab", NULL)));
  pair_free (p);
  p = member_with_rule (rule_new ("arg0path", "/aa/bb", NULL), NULL);
  g_assert_true (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                           DBUS_TYPE_STRING,
                                                           "/aa/bb", NULL)));
  g_assert_false (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                            DBUS_TYPE_STRING,
                                                            "/aa/bb/cc", NULL)));
  pair_free (p);

  /* arg1 has no fixed offset: loosened, and reported */
  p = member_with_rule (rule_new ("member", "Changed", "arg1", "x", NULL), NULL);
  g_assert_cmpint (p->program.precision, ==, BUS_MCAST_PRECISION_NO_ARGS);
  g_assert_true (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                           DBUS_TYPE_STRING,
                                                           "a", "y")));
  g_assert_false (pair_passes_message (p, signal_new (":1.5", "/a", "a.b", "C", NULL)));
  pair_free (p);

  /* all keys together, and two rules sharing a sender */
  {
    BusMcastFilter *filter = member_new (":1.1", NULL);

    add_rule (filter, rule_new ("type", "signal", "sender", ":1.5",
                                "interface", "org.example.Iface",
                                "member", "Changed", "path", "/org/example/obj",
                                "arg0", "v", NULL), NULL);
    add_rule (filter, rule_new ("sender", ":1.5", "member", "Other", NULL), NULL);
    p = pair_new (filter);
    g_assert_true (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                             DBUS_TYPE_STRING,
                                                             "v", NULL)));
    g_assert_false (pair_passes_message (p, with_string_args (broadcast (":1.5"),
                                                              DBUS_TYPE_STRING,
                                                              "w", NULL)));
    g_assert_false (pair_passes_message (p, with_string_args (broadcast (":1.6"),
                                                              DBUS_TYPE_STRING,
                                                              "v", NULL)));
    g_assert_true (pair_passes_message (p, signal_new (":1.5", "/x", "x.y", "Other",
                                                       NULL)));
    g_assert_false (pair_passes_message (p, signal_new (":1.6", "/x", "x.y", "Other",
                                                        NULL)));
    pair_free (p);
    bus_mcast_filter_free (filter);
  }
}

static void
test_member_eavesdrop (void)
{
  BusMcastFilter *filter = member_new (":1.1", NULL);
  Pair *p;

  add_rule (filter, rule_new ("eavesdrop", "true", "type", "method_call",
                              "destination", ":1.9", NULL), NULL);
  add_rule (filter, rule_new ("eavesdrop", "true", "sender", ":1.8", NULL), NULL);
  /* not eavesdropping: never matches unicast to others */
  add_rule (filter, rule_new ("member", "Call", NULL), NULL);
  p = pair_new (filter);

  g_assert_true (pair_passes_message (p, call_new (":1.5", ":1.9")));
  g_assert_false (pair_passes_message (p, call_new (":1.5", ":1.90")));
  g_assert_false (pair_passes_message (p, reply_new (DBUS_MESSAGE_TYPE_METHOD_RETURN,
                                                     ":1.5", ":1.9")));
  g_assert_true (pair_passes_message (p, reply_new (DBUS_MESSAGE_TYPE_METHOD_RETURN,
                                                    ":1.8", ":1.3")));
  g_assert_false (pair_passes_message (p, reply_new (DBUS_MESSAGE_TYPE_METHOD_RETURN,
                                                     ":1.7", ":1.3")));
  /* eavesdropping rules still match broadcasts */
  g_assert_true (pair_passes_message (p, broadcast (":1.8")));
  g_assert_false (pair_passes_message (p, broadcast (":1.7")));

  pair_free (p);
  bus_mcast_filter_free (filter);
}

static void
test_daemon (void)
{
  BusMcastFilter *filter = bus_mcast_filter_new (BUS_MCAST_FILTER_DAEMON);
  Pair *p;
  GByteArray *bytes;
  Raw *raw;

  /* a classic client's rule, and an eavesdropper's */
  add_rule (filter, rule_new ("type", "signal", "member", "Changed", NULL), NULL);
  add_rule (filter, rule_new ("eavesdrop", "true", "interface", "org.example.Spied",
                              NULL), NULL);
  p = pair_new (filter);
  g_test_message ("daemon filter with 2 rules: %u instructions",
                  p->program.len);

  /* to a name: unless a member's filter claimed it (it got it directly),
   * routed by the daemon */
  g_assert_true (pair_passes_unclaimed (p, call_new (":1.5", ":1.1")));
  g_assert_true (pair_passes_unclaimed (p, call_new (":1.5", "org.example.Member")));
  g_assert_true (pair_passes_unclaimed (p, reply_new (DBUS_MESSAGE_TYPE_ERROR,
                                                      ":1.5", ":1.10")));
  /* the bus driver's */
  g_assert_true (pair_passes_unclaimed (p, call_new (":1.5", "org.freedesktop.DBus")));
  /* without a destination: for the bus driver */
  g_assert_true (pair_passes_message (p, call_new (":1.5", NULL)));
  /* broadcasts its rules want */
  g_assert_true (pair_passes_message (p, broadcast (":1.5")));
  g_assert_false (pair_passes_message (p, signal_new (":1.5", "/a", "a.b", "Other",
                                                      NULL)));
  /* eavesdropped unicast to a member */
  g_assert_true (pair_passes_message (p, signal_new (":1.5", "/a", "org.example.Spied",
                                                     "X", ":1.1")));

  /* malformed: passed, so that the daemon disconnects the sender */
  bytes = raw_finish (raw_signal (FALSE, ":1.5", ":1.1"), NULL, 0);
  g_assert_true (bytes_valid (bytes->data, bytes->len));
  bytes->data[3] = 2;   /* version */
  g_assert_true (pair_passes_raw (p, bytes));
  bytes = raw_finish (raw_signal (FALSE, ":1.5", ":1.1"), NULL, 0);
  g_byte_array_set_size (bytes, bytes->len - 1);
  g_assert_true (pair_passes_raw (p, bytes));
  g_assert_true (pair_passes (p, (const guint8 *) "l\4\0\1", 4));
  /* longer than a packet may be: passed, to disconnect the sender */
  {
    guint8 *big = g_malloc0 (DBUS_SEQPACKET_FRAGMENT_SIZE);

    bytes = raw_finish (raw_signal (FALSE, ":1.5", ":1.1"), big,
                        DBUS_SEQPACKET_FRAGMENT_SIZE);
    g_assert_true (pair_passes_raw (p, bytes));
    g_free (big);
  }
  /* fds for a member: sent straight to the daemon (SCM_UNIX_DIRECT), which
   * routes them */
  raw = raw_signal (FALSE, ":1.5", ":1.1");
  raw_field_u32 (raw, DBUS_HEADER_FIELD_UNIX_FDS, 'u', 1);
  g_assert_true (pair_passes_raw (p, raw_finish (raw, NULL, 0)));
  /* DESTINATION with the wrong type */
  raw = raw_signal (FALSE, ":1.5", NULL);
  raw_field_u32 (raw, DBUS_HEADER_FIELD_DESTINATION, 'u', 1);
  g_assert_true (pair_passes_raw (p, raw_finish (raw, NULL, 0)));
  /* big-endian: passed, the daemon converts it */
  bytes = raw_finish (raw_signal (TRUE, ":1.5", ":1.1"), NULL, 0);
  g_assert_true (bytes_valid (bytes->data, bytes->len));
  g_assert_true (pair_passes_raw (p, bytes));

  pair_free (p);
  bus_mcast_filter_free (filter);
}

static void
test_accept_all (void)
{
  BusMcastFilter *filter = member_new (":1.1", NULL);
  Pair *p;

  bus_mcast_filter_accept_all (filter);
  p = pair_new (filter);
  g_assert_cmpuint (p->program.len, ==, 1);
  g_assert_true (pair_passes_message (p, call_new (":1.5", ":1.9")));
  g_assert_true (pair_passes_message (p, broadcast (":1.5")));
  g_assert_true (pair_passes (p, (const guint8 *) "garbage", 7));
  pair_free (p);
  bus_mcast_filter_free (filter);
}

/* Hand-made packets: what a member drops, and that the builder makes
 * valid messages where it should */
static void
test_member_malformed (void)
{
  BusMcastFilter *filter = member_new (":1.1", NULL);
  Pair *p;
  GByteArray *bytes;
  Raw *raw;
  int i;
  static const guint8 body[8] = { 1, 0, 0, 0, 'x', 0, 0, 0 };

  add_rule (filter, rule_new ("type", "signal", NULL), NULL);
  p = pair_new (filter);

  /* valid, by hand: passes */
  g_assert_true (pair_passes_raw (p, raw_finish (raw_signal (FALSE, ":1.5", ":1.1"),
                                                 NULL, 0)));
  g_assert_true (pair_passes_raw (p, raw_finish (raw_signal (FALSE, ":1.5", NULL),
                                                 NULL, 0)));
  /* fds never come through the group: a message saying it has some
   * does not reach a member */
  raw = raw_signal (FALSE, ":1.5", ":1.1");
  raw_field_u32 (raw, DBUS_HEADER_FIELD_UNIX_FDS, 'u', 1);
  g_assert_false (pair_passes_raw (p, raw_finish (raw, NULL, 0)));
  /* unknown fields: the daemon strips them (HeaderFiltering), so such a
   * message reaches members only through it */
  raw = raw_signal (FALSE, ":1.5", NULL);
  raw_field_string (raw, 200, 's', "unknown");
  raw_field_u32 (raw, 100, 'u', 3);
  raw_field_string (raw, 101, 'g', "ss");
  raw_field_string (raw, DBUS_HEADER_FIELD_SIGNATURE, 'g', "s");
  bytes = raw_finish (raw, body, 6);
  g_assert_true (bytes_valid (bytes->data, bytes->len));
  g_assert_false (pair_passes_raw (p, bytes));
  /* even addressed to the member */
  raw = raw_new (FALSE, DBUS_MESSAGE_TYPE_METHOD_CALL);
  raw_field_string (raw, 42, 'o', "/x");
  raw_field_string (raw, DBUS_HEADER_FIELD_PATH, 'o', "/x");
  raw_field_string (raw, DBUS_HEADER_FIELD_MEMBER, 's', "M");
  raw_field_string (raw, DBUS_HEADER_FIELD_DESTINATION, 's', ":1.1");
  bytes = raw_finish (raw, NULL, 0);
  g_assert_true (bytes_valid (bytes->data, bytes->len));
  g_assert_false (pair_passes_raw (p, bytes));

  /* big-endian, even valid: dropped (the daemon converts it) */
  bytes = raw_finish (raw_signal (TRUE, ":1.5", ":1.1"), NULL, 0);
  g_assert_true (bytes_valid (bytes->data, bytes->len));
  g_assert_false (pair_passes_raw (p, bytes));
  /* version, type */
  bytes = raw_finish (raw_signal (FALSE, ":1.5", NULL), NULL, 0);
  bytes->data[3] = 0;
  g_assert_false (pair_passes_raw (p, bytes));
  bytes = raw_finish (raw_signal (FALSE, ":1.5", NULL), NULL, 0);
  bytes->data[1] = 5;
  g_assert_false (pair_passes_raw (p, bytes));
  bytes = raw_finish (raw_signal (FALSE, ":1.5", NULL), NULL, 0);
  bytes->data[1] = 0;
  g_assert_false (pair_passes_raw (p, bytes));
  /* body length wrong either way */
  bytes = raw_finish (raw_signal (FALSE, ":1.5", NULL), body, 8);
  bytes->data[4] = 7;
  g_assert_false (pair_passes_raw (p, bytes));
  bytes = raw_finish (raw_signal (FALSE, ":1.5", NULL), body, 8);
  bytes->data[4] = 9;
  g_assert_false (pair_passes_raw (p, bytes));
  /* field array length beyond the packet, or cutting a field */
  bytes = raw_finish (raw_signal (FALSE, ":1.5", NULL), NULL, 0);
  bytes->data[12] += 8;
  g_assert_false (pair_passes_raw (p, bytes));
  bytes = raw_finish (raw_signal (FALSE, ":1.5", NULL), NULL, 0);
  bytes->data[12] -= 1;
  g_assert_false (pair_passes_raw (p, bytes));
  /* a string length overrunning the field array */
  raw = raw_signal (FALSE, ":1.5", NULL);
  i = raw->bytes->len;
  raw_field_string (raw, DBUS_HEADER_FIELD_DESTINATION, 's', ":1.1");
  bytes = raw_finish (raw, NULL, 0);
  bytes->data[i + 4 + ((8 - i % 8) % 8)] = 200;
  g_assert_false (pair_passes_raw (p, bytes));
  /* a known field with the wrong type */
  raw = raw_signal (FALSE, ":1.5", NULL);
  raw_field_u32 (raw, DBUS_HEADER_FIELD_DESTINATION, 'u', 1);
  g_assert_false (pair_passes_raw (p, raw_finish (raw, NULL, 0)));
  /* code 0 */
  raw = raw_signal (FALSE, ":1.5", NULL);
  raw_field_u32 (raw, 0, 'u', 1);
  g_assert_false (pair_passes_raw (p, raw_finish (raw, NULL, 0)));
  /* an unknown field of a type the filter cannot skip */
  raw = raw_signal (FALSE, ":1.5", NULL);
  raw_field_u32 (raw, 50, 'q', 1);
  g_assert_false (pair_passes_raw (p, raw_finish (raw, NULL, 0)));
  /* more fields than the filter walks (9), which takes unknown ones:
   * valid, but dropped */
  raw = raw_signal (FALSE, ":1.5", NULL);
  for (i = 0; i < 6; i++)
    raw_field_u32 (raw, 20 + i, 'u', i);
  bytes = raw_finish (raw, NULL, 0);
  g_assert_true (bytes_valid (bytes->data, bytes->len));
  g_assert_false (pair_passes_raw (p, bytes));
  /* shorter than the fixed header */
  g_assert_false (pair_passes (p, (const guint8 *) "l\4\0\1\0\0\0\0", 8));
  /* valid, but longer than any reader takes (it would be truncated) */
  {
    guint8 *big = g_malloc0 (DBUS_SEQPACKET_FRAGMENT_SIZE);
    guint32 length = DBUS_SEQPACKET_FRAGMENT_SIZE - 5;

    memcpy (big, &length, sizeof (length));
    memset (big + 4, 'x', length);
    raw = raw_signal (FALSE, ":1.5", ":1.1");
    raw_field_string (raw, DBUS_HEADER_FIELD_SIGNATURE, 'g', "s");
    bytes = raw_finish (raw, big, DBUS_SEQPACKET_FRAGMENT_SIZE);
    g_assert_true (bytes_valid (bytes->data, bytes->len));
    g_assert_cmpuint (bytes->len, >, DBUS_SEQPACKET_FRAGMENT_SIZE);
    g_assert_false (pair_passes_raw (p, bytes));
    g_free (big);
  }

  pair_free (p);
  bus_mcast_filter_free (filter);
}

/* Random bytes and truncated valid messages: a member passes only valid
 * messages; the daemon passes all that are not */
static void
test_fuzz (void)
{
  BusMcastFilter *member = member_new (":1.1", NULL);
  BusMcastFilter *daemon = bus_mcast_filter_new (BUS_MCAST_FILTER_DAEMON);
  Pair *pm, *pd;
  GRand *rand = g_rand_new_with_seed (20261203);
  DBusMessage *messages[4];
  guint8 buf[512];
  int i, j, passed = 0;

  add_rule (member, rule_new (NULL, NULL), NULL);
  add_rule (member, rule_new ("eavesdrop", "true", NULL), NULL);
  pm = pair_new (member);
  pd = pair_new (daemon);

  for (i = 0; i < 2000; i++)
    {
      gsize len = g_rand_int_range (rand, 0, sizeof (buf));

      for (j = 0; j < (int) len; j++)
        buf[j] = g_rand_int (rand);
      /* often a plausible fixed header */
      if (len >= 16 && i % 2 == 0)
        {
          buf[0] = 'l';
          buf[3] = 1;
          buf[1] = 1 + i % 4;
          buf[12] = g_rand_int_range (rand, 0, len - 15);
          buf[13] = buf[14] = buf[15] = 0;
          buf[4] = len - 16 - ((buf[12] + 7) & ~7);
          buf[5] = buf[6] = buf[7] = 0;
        }
      if (len == 0)
        continue;
      if (pair_passes (pm, buf, len))
        {
          g_assert_true (bytes_valid (buf, len));
          passed++;
        }
      if (!bytes_valid (buf, len))
        g_assert_true (pair_passes (pd, buf, len));
    }
  g_test_message ("fuzz: %d of 2000 random packets passed the member filter",
                  passed);

  messages[0] = with_string_args (broadcast (":1.5"), DBUS_TYPE_STRING, "abc", "d");
  messages[1] = call_new (":1.5", ":1.1");
  messages[2] = reply_new (DBUS_MESSAGE_TYPE_ERROR, ":1.5", ":1.1");
  messages[3] = signal_new (":1.5", "/a/very/long/path/to/test/truncation",
                            "a.b", "C", ":1.1");
  for (i = 0; i < (int) G_N_ELEMENTS (messages); i++)
    {
      char *data;
      int len;

      dbus_message_set_serial (messages[i], 1);
      g_assert_true (dbus_message_marshal (messages[i], &data, &len));
      g_assert_true (pair_passes (pm, (const guint8 *) data, len));
      for (j = 1; j < len; j++)
        {
          g_assert_false (pair_passes (pm, (const guint8 *) data, j));
          g_assert_true (pair_passes (pd, (const guint8 *) data, j));
        }
      dbus_free (data);
      dbus_message_unref (messages[i]);
    }

  g_rand_free (rand);
  pair_free (pm);
  pair_free (pd);
  bus_mcast_filter_free (member);
  bus_mcast_filter_free (daemon);
}

static const char *
precision_name (BusMcastPrecision precision)
{
  switch (precision)
    {
      case BUS_MCAST_PRECISION_EXACT: return "EXACT";
      case BUS_MCAST_PRECISION_NO_ARGS: return "NO_ARGS";
      case BUS_MCAST_PRECISION_SENDERS: return "SENDERS";
      case BUS_MCAST_PRECISION_SIGNALS: return "SIGNALS";
      default: return "?";
    }
}

/* n realistic rules; the member owns :1.1000 */
static Pair *
member_with_realistic_rules (int      n,
                             gboolean with_arg0)
{
  BusMcastFilter *filter = member_new (":1.1000", NULL);
  Pair *p;
  int i;

  for (i = 0; i < n; i++)
    {
      char *sender = g_strdup_printf (":1.%d", i);
      char *iface = g_strdup_printf ("org.example.Iface%d", i);
      char *member = g_strdup_printf ("Changed%d", i);
      char *path = g_strdup_printf ("/org/example/obj%d", i);
      DBusMatchRule *rule;

      if (with_arg0)
        rule = rule_new ("type", "signal", "sender", sender, "interface", iface,
                         "member", member, "path", path,
                         "arg0", "org.freedesktop.DBus.Properties", NULL);
      else
        rule = rule_new ("type", "signal", "sender", sender, "interface", iface,
                         "member", member, "path", path, NULL);
      add_rule (filter, rule, NULL);
      g_free (sender);
      g_free (iface);
      g_free (member);
      g_free (path);
    }
  /* what the daemon spends on such a member's AddMatch */
  g_test_timer_start ();
  p = pair_new (filter);
  g_test_message ("%d realistic rules compiled and attached in %.1f ms", n,
                  g_test_timer_elapsed () * 1000);
  bus_mcast_filter_free (filter);
  return p;
}

static DBusMessage *
realistic_signal (int         sender,
                  int         iface,
                  const char *arg0)
{
  char *s = g_strdup_printf (":1.%d", sender);
  char *i = g_strdup_printf ("org.example.Iface%d", iface);
  char *m = g_strdup_printf ("Changed%d", iface);
  char *p = g_strdup_printf ("/org/example/obj%d", iface);
  DBusMessage *message = signal_new (s, p, i, m, NULL);

  if (arg0 != NULL)
    with_string_args (message, DBUS_TYPE_STRING, arg0, NULL);
  g_free (s);
  g_free (i);
  g_free (m);
  g_free (p);
  return message;
}

static void
test_sizes (void)
{
  static const int counts[] = { 1, 64, 512 };
  gsize c;

  for (c = 0; c < G_N_ELEMENTS (counts); c++)
    {
      int n = counts[c];
      Pair *p = member_with_realistic_rules (n, FALSE);

      g_test_message ("%d realistic rules (type, sender, interface, member, "
                      "path): %u instructions, precision %s", n,
                      p->program.len, precision_name (p->program.precision));
      g_assert_cmpuint (p->program.len, <=, BPF_MAXINSNS);

      /* what must pass passes, at any precision */
      g_assert_true (pair_passes_message (p, realistic_signal (0, 0, NULL)));
      g_assert_true (pair_passes_message (p, realistic_signal (n - 1, n - 1, NULL)));
      /* unknown sender: only SIGNALS lets it through */
      g_assert_true (pair_passes_message (p, realistic_signal (n, n, NULL))
                     == (p->program.precision == BUS_MCAST_PRECISION_SIGNALS));
      /* known sender, another rule's keys: only exact programs drop it */
      if (n > 1)
        g_assert_true (pair_passes_message (p, realistic_signal (0, 1, NULL))
                       == (p->program.precision >= BUS_MCAST_PRECISION_SENDERS));
      /* SENDERS loosens as few senders as it must: the others keep their
       * rules */
      if (p->program.precision == BUS_MCAST_PRECISION_SENDERS)
        {
          int i, loose = 0;

          for (i = 0; i < n; i++)
            loose += pair_passes_message (p, realistic_signal (i, (i + 1) % n, NULL));
          g_test_message ("%d of %d senders matched on the sender alone", loose, n);
          g_assert_cmpint (loose, >, 0);
          g_assert_cmpint (loose, <, n);
        }
      /* unicast to others never */
      g_assert_false (pair_passes_message (p, call_new (":1.0", ":1.1001")));
      g_assert_true (pair_passes_message (p, call_new (":1.0", ":1.1000")));
      pair_free (p);
    }

  /* 64 rules with arg0 too */
  {
    Pair *p = member_with_realistic_rules (64, TRUE);

    g_test_message ("64 realistic rules with arg0: %u instructions, precision %s",
                    p->program.len, precision_name (p->program.precision));
    g_assert_true (pair_passes_message (p, realistic_signal (5, 5,
                                                             "org.freedesktop.DBus.Properties")));
    g_assert_true (pair_passes_message (p, realistic_signal (5, 5, "other"))
                   == (p->program.precision != BUS_MCAST_PRECISION_EXACT));
    pair_free (p);
  }
}

/* Rules that differ in their member, as a desktop client's (and the
 * benchmark's) often do: 512 of them on one interface stay exact, since
 * the member is a tree rather than a key test per rule */
static void
test_member_tree (void)
{
  BusMcastFilter *filter = member_new (":1.1000", NULL);
  char member[32];
  Pair *p;
  int i;

  for (i = 0; i < 512; i++)
    {
      g_snprintf (member, sizeof (member), "Signal%d", i);
      add_rule (filter, rule_new ("type", "signal", "interface", "org.example.Bench",
                                  "member", member, NULL), NULL);
    }
  p = pair_new (filter);
  g_test_message ("512 rules of one interface: %u instructions, precision %s",
                  p->program.len, precision_name (p->program.precision));
  g_assert_cmpint (p->program.precision, ==, BUS_MCAST_PRECISION_EXACT);
  for (i = 0; i < 512; i += 73)
    {
      g_snprintf (member, sizeof (member), "Signal%d", i);
      g_assert_true (pair_passes_message (p, signal_new (":1.3", "/o", "org.example.Bench",
                                                         member, NULL)));
      g_assert_false (pair_passes_message (p, signal_new (":1.3", "/o", "org.example.Other",
                                                          member, NULL)));
    }
  g_assert_false (pair_passes_message (p, signal_new (":1.3", "/o", "org.example.Bench",
                                                      "Signal512", NULL)));
  g_assert_false (pair_passes_message (p, signal_new (":1.3", "/o", "org.example.Bench",
                                                      "Signal", NULL)));
  pair_free (p);
}

/* Random rules over a small vocabulary, with and without each key, and
 * every signal the vocabulary can make: the exact program passes a signal
 * iff one of the rules matches it as libdbus matches rules
 * (_dbus_match_rule_matches()), whichever keys the trees compared */
static void
test_rule_trees_agree (void)
{
  static const char * const senders[] = { ":1.5", ":1.6" };
  static const char * const interfaces[] = { "a.I1", "a.I2", "a.I12" };
  static const char * const members[] = { "M1", "M2", "M12" };
  static const char * const paths[] = { "/a", "/b" };
  DBusMatchRule *rules[12];
  int round, i;

  for (round = 0; round < 20; round++)
    {
      BusMcastFilter *filter = member_new (":1.1000", NULL);
      int n_rules = g_test_rand_int_range (1, G_N_ELEMENTS (rules) + 1);
      int si, ii, mi, pi, passed = 0;
      Pair *p;

      for (i = 0; i < n_rules; i++)
        {
          const char *keys[9] = { "type", "signal" };
          int k = 2;

#define MAYBE(key, values) \
          if (g_test_rand_int_range (0, 3) != 0) \
            { \
              keys[k++] = key; \
              keys[k++] = values[g_test_rand_int_range (0, G_N_ELEMENTS (values))]; \
            }
          MAYBE ("sender", senders);
          MAYBE ("interface", interfaces);
          MAYBE ("member", members);
#undef MAYBE
          rules[i] = rule_new (keys[0], keys[1], k > 2 ? keys[2] : NULL, keys[3],
                               k > 4 ? keys[4] : NULL, keys[5],
                               k > 6 ? keys[6] : NULL, keys[7], NULL);
          if (g_test_rand_bit ())
            {
              rules[i]->flags |= DBUS_MATCH_PATH;
              rules[i]->path = g_strdup (paths[g_test_rand_int_range (0, 2)]);
            }
          add_rule (filter, rules[i], NULL);
        }
      p = pair_new (filter);
      g_assert_cmpint (p->program.precision, ==, BUS_MCAST_PRECISION_EXACT);

      for (si = 0; si < (int) G_N_ELEMENTS (senders); si++)
        for (ii = 0; ii < (int) G_N_ELEMENTS (interfaces); ii++)
          for (mi = 0; mi < (int) G_N_ELEMENTS (members); mi++)
            for (pi = 0; pi < (int) G_N_ELEMENTS (paths); pi++)
              {
                DBusMessage *m = signal_new (senders[si], paths[pi], interfaces[ii],
                                             members[mi], NULL);
                gboolean expected = FALSE;

                for (i = 0; i < n_rules && !expected; i++)
                  expected = _dbus_match_rule_matches (rules[i], m, ":1.1000", NULL);
                passed += expected;
                if (pair_passes_message (p, m) != expected)
                  g_error ("round %d: %s %s %s.%s: the filter says %s, libdbus %s",
                           round, senders[si], paths[pi], interfaces[ii], members[mi],
                           expected ? "drop" : "pass", expected ? "match" : "no match");
              }
      g_test_message ("round %d: %d rules, %d of 36 signals match", round, n_rules, passed);
      pair_free (p);
    }
}

/* The loosening steps, each forced by size */
static void
test_precision (void)
{
  BusMcastFilter *filter;
  DBusError error = DBUS_ERROR_INIT;
  BusMcastProgram program;
  Pair *p;
  int i;

  /* long arg0 values push out the args first */
  filter = member_new (":1.1", NULL);
  for (i = 0; i < 40; i++)
    {
      char *sender = g_strdup_printf (":1.%d", 100 + i);
      char *arg = g_strdup_printf ("%0200d", i);

      add_rule (filter, rule_new ("sender", sender, "member", "M", "arg0", arg,
                                  NULL), NULL);
      g_free (sender);
      g_free (arg);
    }
  p = pair_new (filter);
  g_test_message ("40 rules with 200-byte arg0: %u instructions, precision %s",
                  p->program.len, precision_name (p->program.precision));
  g_assert_cmpint (p->program.precision, ==, BUS_MCAST_PRECISION_NO_ARGS);
  g_assert_true (pair_passes_message (p, signal_new (":1.100", "/a", "a.b", "M", NULL)));
  g_assert_false (pair_passes_message (p, signal_new (":1.100", "/a", "a.b", "N", NULL)));
  g_assert_false (pair_passes_message (p, signal_new (":1.99", "/a", "a.b", "M", NULL)));
  pair_free (p);

  /* SENDERS: the rules with a sender pass any signal of theirs, the rule
   * without one still has its member checked */
  add_rule (filter, rule_new ("member", "Unsent", NULL), NULL);
  for (i = 0; i < 400; i++)
    {
      char *sender = g_strdup_printf (":1.%d", 1000 + i);
      char *iface = g_strdup_printf ("org.example.LongInterfaceName%d", i);

      add_rule (filter, rule_new ("sender", sender, "interface", iface, NULL), NULL);
      g_free (sender);
      g_free (iface);
    }
  p = pair_new (filter);
  g_test_message ("441 rules, one without sender: %u instructions, precision %s",
                  p->program.len, precision_name (p->program.precision));
  g_assert_cmpint (p->program.precision, ==, BUS_MCAST_PRECISION_SENDERS);
  g_assert_true (pair_passes_message (p, signal_new (":1.1200", "/a", "a.b", "Q", NULL)));
  g_assert_true (pair_passes_message (p, signal_new (":1.99", "/a", "a.b", "Unsent", NULL)));
  g_assert_false (pair_passes_message (p, signal_new (":1.99", "/a", "a.b", "Q", NULL)));
  g_assert_false (pair_passes_message (p, call_new (":1.99", ":1.2")));
  pair_free (p);
  bus_mcast_filter_free (filter);

  /* too many senders: SIGNALS */
  filter = member_new (":1.1", NULL);
  for (i = 0; i < 3000; i++)
    {
      char *sender = g_strdup_printf (":1.%d", 10000 + i * 7);

      add_rule (filter, rule_new ("sender", sender, NULL), NULL);
      g_free (sender);
    }
  p = pair_new (filter);
  g_test_message ("3000 senders: %u instructions, precision %s",
                  p->program.len, precision_name (p->program.precision));
  g_assert_cmpint (p->program.precision, ==, BUS_MCAST_PRECISION_SIGNALS);
  g_assert_true (pair_passes_message (p, broadcast (":1.3")));
  g_assert_false (pair_passes_message (p, call_new (":1.10000", ":1.2")));
  g_assert_true (pair_passes_message (p, call_new (":1.10000", ":1.1")));
  pair_free (p);
  bus_mcast_filter_free (filter);

  /* names never loosened: too many names fail for a member ... */
  filter = member_new (NULL, NULL);
  for (i = 0; i < 1500; i++)
    {
      char *name = g_strdup_printf ("org.example.Service%d.Instance", i);

      g_assert_true (bus_mcast_filter_add_name (filter, name));
      g_free (name);
    }
  g_assert_false (bus_mcast_filter_compile (filter, &program, &error));
  g_assert_cmpstr (error.name, ==, DBUS_ERROR_LIMITS_EXCEEDED);
  g_test_message ("1500 names, member: %s", error.message);
  dbus_error_free (&error);
  bus_mcast_filter_free (filter);

  /* too many eavesdropping rules make the daemon take every unicast,
   * claimed or not */
  filter = bus_mcast_filter_new (BUS_MCAST_FILTER_DAEMON);
  for (i = 0; i < 1500; i++)
    {
      char *iface = g_strdup_printf ("org.example.Spied%d.Instance", i);

      add_rule (filter, rule_new ("eavesdrop", "true", "interface", iface,
                                  NULL), NULL);
      g_free (iface);
    }
  p = pair_new (filter);
  g_test_message ("1500 eavesdropping rules, daemon: %u instructions",
                  p->program.len);
  g_assert_true (pair_passes_message (p, call_new (":1.5",
                                                   "org.example.Service1.Instance")));
  g_assert_true (pair_passes_message (p, call_new (":1.5", ":1.7")));
  g_assert_true (pair_passes_message (p, call_new (":1.5", NULL)));
  pair_free (p);
  bus_mcast_filter_free (filter);
}

/* Many names: long jumps, and every name still exact */
static void
test_many_names (void)
{
  BusMcastFilter *filter = member_new (NULL, NULL);
  Pair *p;
  int i;

  for (i = 0; i < 300; i++)
    {
      char *name = g_strdup_printf (":1.%d", i * 3);

      g_assert_true (bus_mcast_filter_add_name (filter, name));
      g_free (name);
    }
  add_rule (filter, rule_new ("member", "Changed", NULL), NULL);
  p = pair_new (filter);
  g_test_message ("300 names, 1 rule: %u instructions", p->program.len);
  for (i = 0; i < 900; i++)
    {
      char *name = g_strdup_printf (":1.%d", i);

      g_assert_true (pair_passes_message (p, call_new (":1.5", name)) == (i % 3 == 0));
      g_free (name);
    }
  g_assert_true (pair_passes_message (p, broadcast (":1.5")));
  pair_free (p);
  bus_mcast_filter_free (filter);
}

int
main (int    argc,
      char **argv)
{
  int ret;

  g_test_init (&argc, &argv, NULL);
  all_rules = g_ptr_array_new_with_free_func (rule_free);

  g_test_add_func ("/mcast-filter/member/destination", test_member_destination);
  g_test_add_func ("/mcast-filter/member/unicast-to-others",
                   test_member_unicast_to_others);
  g_test_add_func ("/mcast-filter/member/keys", test_member_keys);
  g_test_add_func ("/mcast-filter/member/eavesdrop", test_member_eavesdrop);
  g_test_add_func ("/mcast-filter/member/malformed", test_member_malformed);
  g_test_add_func ("/mcast-filter/member/many-names", test_many_names);
  g_test_add_func ("/mcast-filter/daemon", test_daemon);
  g_test_add_func ("/mcast-filter/accept-all", test_accept_all);
  g_test_add_func ("/mcast-filter/fuzz", test_fuzz);
  g_test_add_func ("/mcast-filter/sizes", test_sizes);
  g_test_add_func ("/mcast-filter/member-tree", test_member_tree);
  g_test_add_func ("/mcast-filter/rule-trees-agree", test_rule_trees_agree);
  g_test_add_func ("/mcast-filter/precision", test_precision);

  ret = g_test_run ();
  g_ptr_array_unref (all_rules);
  return ret;
}
