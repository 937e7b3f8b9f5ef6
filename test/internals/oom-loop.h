/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* test/internals/oom-loop.h  Out-of-memory loops for the unit tests
 *
 * What this is for: oom_loop_run() runs a test function with every
 * allocation failing in turn (upstream's _dbus_test_oom_handling(), in a
 * build with --enable-embedded-tests) and asserts after each run that it
 * freed all it allocated; in other builds the GLib test is skipped.  The
 * function returns TRUE when its outcome was right for have_memory.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#ifndef TEST_INTERNALS_OOM_LOOP_H
#define TEST_INTERNALS_OOM_LOOP_H

#include <dbus/dbus-internals.h>
#include <dbus/dbus-memory.h>

#include <glib.h>

#ifdef DBUS_ENABLE_EMBEDDED_TESTS
typedef struct
{
  DBusTestMemoryFunction func;
  void *data;
} OomLoop;

static dbus_bool_t
oom_loop_once (void        *data,
               dbus_bool_t  have_memory)
{
  const OomLoop *loop = data;
  int blocks = _dbus_get_malloc_blocks_outstanding ();

  if (!loop->func (loop->data, have_memory))
    return FALSE;
  g_assert_cmpint (_dbus_get_malloc_blocks_outstanding (), ==, blocks);
  return TRUE;
}
#endif

static inline void
oom_loop_run (const char             *description,
              DBusTestMemoryFunction  func,
              void                   *data)
{
#ifdef DBUS_ENABLE_EMBEDDED_TESTS
  OomLoop loop = { func, data };

  g_assert_true (_dbus_test_oom_handling (description, oom_loop_once, &loop));
#else
  g_test_skip ("failing allocations needs a libdbus built with "
               "--enable-embedded-tests");
#endif
}

#endif /* TEST_INTERNALS_OOM_LOOP_H */
