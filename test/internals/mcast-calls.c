/* test/internals/mcast-calls.c  Unit tests of dbus/dbus-mcast-calls.c
 *
 * A member's table of the calls it awaits, written through the member's
 * side and read through the daemon's, in one process: what the daemon
 * reads, a full table, the reply ring, which entries count as sent, and
 * what a member cannot do to the
 * daemon's mapping (resize it, claim more slots than there are).
 *
 * Built against libdbus' internal static library (the functions are
 * private).
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>

#include <dbus/dbus.h>
#include <dbus/dbus-mcast-calls.h>

#include <glib.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct
{
  int fd;
  const DBusMcastCallTable *daemon;
  DBusMcastCalls *member;
} Fixture;

static void
setup (Fixture       *f,
       gconstpointer  data)
{
  DBusError error = DBUS_ERROR_INIT;

  g_assert_true (_dbus_mcast_calls_create (&f->fd, &f->daemon, &error));
  g_assert_false (dbus_error_is_set (&error));
  f->member = _dbus_mcast_calls_new ();
  g_assert_nonnull (f->member);
  g_assert_false (_dbus_mcast_calls_is_attached (f->member));
  g_assert_cmpint (_dbus_mcast_calls_add (f->member, 7, 99), ==, -1);
  g_assert_true (_dbus_mcast_calls_attach (f->member, f->fd));
  g_assert_true (_dbus_mcast_calls_is_attached (f->member));
  /* once */
  g_assert_false (_dbus_mcast_calls_attach (f->member, f->fd));
}

static void
teardown (Fixture       *f,
          gconstpointer  data)
{
  _dbus_mcast_calls_free (f->member);
  _dbus_mcast_calls_unmap (f->daemon);
  close (f->fd);
}

/* The daemon reads what the member lists, and what it takes off */
static void
test_calls (Fixture       *f,
            gconstpointer  data)
{
  DBusMcastCallEntry call;
  int a, b, c;

  g_assert_cmpuint (_dbus_mcast_calls_get_n_slots (f->daemon), ==, 0);
  a = _dbus_mcast_calls_add (f->member, 7, 100);
  b = _dbus_mcast_calls_add (f->member, DBUS_MCAST_CALLS_UNKNOWN_CALLEE, 101);
  c = _dbus_mcast_calls_add (f->member, 7, 102);
  g_assert_cmpint (a, >=, 0);
  g_assert_cmpint (b, >=, 0);
  g_assert_cmpint (c, >=, 0);
  g_assert_cmpuint (_dbus_mcast_calls_get_n_slots (f->daemon), ==, 3);

  /* Nothing sent yet: each is sent with the member's first send */
  g_assert_true (_dbus_mcast_calls_get_call (f->daemon, a, &call));
  g_assert_cmpuint (call.peer, ==, 7);
  g_assert_cmpuint (call.serial, ==, 100);
  g_assert_cmpuint (call.sends, ==, 1);
  /* A call to a well-known name, until the callee is known */
  g_assert_true (_dbus_mcast_calls_get_call (f->daemon, b, &call));
  g_assert_cmpuint (call.peer, ==, DBUS_MCAST_CALLS_UNKNOWN_CALLEE);
  _dbus_mcast_calls_set_callee (f->member, b, 9);
  g_assert_true (_dbus_mcast_calls_get_call (f->daemon, b, &call));
  g_assert_cmpuint (call.peer, ==, 9);
  g_assert_cmpuint (call.serial, ==, 101);

  /* Answered: gone; its slot is used again */
  _dbus_mcast_calls_remove (f->member, a);
  g_assert_false (_dbus_mcast_calls_get_call (f->daemon, a, &call));
  _dbus_mcast_calls_sent (f->member);
  _dbus_mcast_calls_sent (f->member);
  g_assert_cmpint (_dbus_mcast_calls_add (f->member, 8, 103), ==, a);
  g_assert_true (_dbus_mcast_calls_get_call (f->daemon, a, &call));
  g_assert_cmpuint (call.peer, ==, 8);
  g_assert_cmpuint (call.serial, ==, 103);
  g_assert_cmpuint (call.sends, ==, 3);
  g_assert_cmpuint (_dbus_mcast_calls_get_n_slots (f->daemon), ==, 3);
}

/* Which departures a member may await a reply from */
static void
test_awaits (Fixture       *f,
             gconstpointer  data)
{
  const dbus_uint64_t departed[] = { 3, 4 };
  int a, b;

  g_assert_false (_dbus_mcast_calls_awaits (f->daemon, departed, 2));
  a = _dbus_mcast_calls_add (f->member, 5, 100);
  g_assert_false (_dbus_mcast_calls_awaits (f->daemon, departed, 2));
  b = _dbus_mcast_calls_add (f->member, 4, 101);
  g_assert_true (_dbus_mcast_calls_awaits (f->daemon, departed, 2));
  g_assert_false (_dbus_mcast_calls_awaits (f->daemon, departed, 1));
  _dbus_mcast_calls_remove (f->member, b);
  g_assert_false (_dbus_mcast_calls_awaits (f->daemon, departed, 2));

  /* A call whose callee is not known yet may be to anyone */
  b = _dbus_mcast_calls_add (f->member, DBUS_MCAST_CALLS_UNKNOWN_CALLEE, 102);
  g_assert_true (_dbus_mcast_calls_awaits (f->daemon, departed, 2));
  _dbus_mcast_calls_set_callee (f->member, b, 5);
  g_assert_false (_dbus_mcast_calls_awaits (f->daemon, departed, 2));
  _dbus_mcast_calls_remove (f->member, a);
}

/* A full table refuses, until a call is taken off */
static void
test_full (Fixture       *f,
           gconstpointer  data)
{
  unsigned int i;

  for (i = 0; i < DBUS_MCAST_CALLS_SLOTS; i++)
    g_assert_cmpint (_dbus_mcast_calls_add (f->member, 1, i + 1), ==, (int) i);
  g_assert_cmpint (_dbus_mcast_calls_add (f->member, 1, 0), ==, -1);
  _dbus_mcast_calls_remove (f->member, 17);
  g_assert_cmpint (_dbus_mcast_calls_add (f->member, 1, 0), ==, 17);
  g_assert_cmpuint (_dbus_mcast_calls_get_n_slots (f->daemon), ==,
                    DBUS_MCAST_CALLS_SLOTS);
}

/* A reply counts once the kernel counted the sends it went in */
static void
test_replies_sent (Fixture       *f,
                   gconstpointer  data)
{
  _dbus_mcast_calls_sent (f->member);
  _dbus_mcast_calls_replied (f->member, 5, 10, 1);
  g_assert_false (_dbus_mcast_calls_has_replied (f->daemon, 1, 5, 10));
  g_assert_true (_dbus_mcast_calls_has_replied (f->daemon, 2, 5, 10));
  _dbus_mcast_calls_sent (f->member);

  /* In three packets: sent with the third */
  _dbus_mcast_calls_replied (f->member, 5, 11, 3);
  g_assert_false (_dbus_mcast_calls_has_replied (f->daemon, 4, 5, 11));
  g_assert_true (_dbus_mcast_calls_has_replied (f->daemon, 5, 5, 11));
}

/* The last replies are kept, older ones give way */
static void
test_replies (Fixture       *f,
              gconstpointer  data)
{
  const dbus_uint64_t all = G_MAXUINT64;
  unsigned int i;

  g_assert_false (_dbus_mcast_calls_has_replied (f->daemon, all, 5, 10));
  _dbus_mcast_calls_replied (f->member, 5, 10, 1);
  g_assert_true (_dbus_mcast_calls_has_replied (f->daemon, all, 5, 10));
  g_assert_false (_dbus_mcast_calls_has_replied (f->daemon, all, 5, 11));
  g_assert_false (_dbus_mcast_calls_has_replied (f->daemon, all, 6, 10));

  for (i = 0; i < DBUS_MCAST_CALLS_REPLIES - 1; i++)
    _dbus_mcast_calls_replied (f->member, 6, 1000 + i, 1);
  g_assert_true (_dbus_mcast_calls_has_replied (f->daemon, all, 5, 10));
  _dbus_mcast_calls_replied (f->member, 6, 2000, 1);
  g_assert_false (_dbus_mcast_calls_has_replied (f->daemon, all, 5, 10));
  g_assert_true (_dbus_mcast_calls_has_replied (f->daemon, all, 6, 2000));
}

/* What a lying member can do to the daemon's mapping: nothing */
static void
test_member_lies (Fixture       *f,
                  gconstpointer  data)
{
  DBusMcastCallTable *table;

  g_assert_cmpint (ftruncate (f->fd, 0), ==, -1);
  g_assert_cmpint (errno, ==, EPERM);
  g_assert_cmpint (ftruncate (f->fd, sizeof (DBusMcastCallTable) * 2), ==, -1);
  g_assert_cmpint (errno, ==, EPERM);
  g_assert_cmpint (fcntl (f->fd, F_ADD_SEALS, F_SEAL_WRITE), ==, -1);
  g_assert_cmpint (errno, ==, EPERM);

  table = mmap (NULL, sizeof (*table), PROT_READ | PROT_WRITE, MAP_SHARED,
                f->fd, 0);
  g_assert_true (table != MAP_FAILED);
  table->n_slots = G_MAXUINT32;
  g_assert_cmpuint (_dbus_mcast_calls_get_n_slots (f->daemon), ==,
                    DBUS_MCAST_CALLS_SLOTS);
  munmap (table, sizeof (*table));
}

/* The member maps only what is a whole table */
static void
test_attach_refuses (void)
{
  DBusMcastCalls *calls = _dbus_mcast_calls_new ();
  int fds[2];
  int small;

  g_assert_nonnull (calls);
  small = memfd_create ("small", MFD_CLOEXEC);
  g_assert_cmpint (small, >=, 0);
  g_assert_cmpint (ftruncate (small, sizeof (DBusMcastCallTable) - 1), ==, 0);
  g_assert_false (_dbus_mcast_calls_attach (calls, small));
  close (small);

  g_assert_cmpint (pipe (fds), ==, 0);
  g_assert_false (_dbus_mcast_calls_attach (calls, fds[0]));
  close (fds[0]);
  close (fds[1]);
  g_assert_false (_dbus_mcast_calls_is_attached (calls));
  _dbus_mcast_calls_free (calls);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add ("/mcast-calls/calls", Fixture, NULL, setup, test_calls, teardown);
  g_test_add ("/mcast-calls/awaits", Fixture, NULL, setup, test_awaits,
              teardown);
  g_test_add ("/mcast-calls/full", Fixture, NULL, setup, test_full, teardown);
  g_test_add ("/mcast-calls/replies", Fixture, NULL, setup, test_replies,
              teardown);
  g_test_add ("/mcast-calls/replies-sent", Fixture, NULL, setup,
              test_replies_sent, teardown);
  g_test_add ("/mcast-calls/member-lies", Fixture, NULL, setup,
              test_member_lies, teardown);
  g_test_add_func ("/mcast-calls/attach-refuses", test_attach_refuses);
  return g_test_run ();
}
