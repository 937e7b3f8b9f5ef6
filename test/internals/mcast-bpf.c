/* test/internals/mcast-bpf.c  The classic BPF assembler (bus/mcast-bpf.c)
 * on a stock kernel.
 *
 * Every test assembles a program, checks how it was laid out (which
 * conditional jumps went through one or two BPF_JA, which BPF_JA became
 * the BPF_RET it leads to), attaches it with SO_ATTACH_FILTER to the
 * receiving end of a socketpair (AF_UNIX, SOCK_DGRAM), so the kernel's
 * checker must accept it, and sends datagrams through the pair.  A socket
 * filter returns how many bytes of the packet to keep: the programs below
 * branch on the first byte of the packet and return small numbers that
 * differ by path, so the length of what arrives tells which way the
 * program went (nothing arrives: it returned 0).
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>

#include <dbus/dbus.h>
#include <dbus/dbus-internals.h>
#include "bus/mcast-bpf.h"

#include <glib.h>

#include "oom-loop.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The size of every datagram sent: more than any path below keeps */
#define PACKET_SIZE 32

/* ---- Assembling --------------------------------------------------------- */

static BusMcastBpf *
bpf_new (void)
{
  BusMcastBpf *bpf = bus_mcast_bpf_new ();

  g_assert_nonnull (bpf);
  return bpf;
}

/* @n instructions that change nothing the programs look at (only X) */
static void
emit_padding (BusMcastBpf *bpf,
              int          n)
{
  int i;

  for (i = 0; i < n; i++)
    bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_IMM, i);
}

/* A = the first byte of the packet */
static void
emit_load_first_byte (BusMcastBpf *bpf)
{
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_B | BPF_ABS, 0);
}

/* If A @op k (BPF_JEQ, BPF_JGT, ...), on at @label, else at the next
 * instruction */
static void
emit_jump_if (BusMcastBpf    *bpf,
              unsigned short  op,
              dbus_uint32_t   k,
              int             label)
{
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | op | BPF_K, k, label,
                           BUS_MCAST_BPF_NEXT);
}

/* A jump target: @label, then a return of @kept.  With @at_ret the label
 * is the return itself, otherwise a BPF_LDX before it. */
static void
emit_target (BusMcastBpf *bpf,
             int          label,
             guint        kept,
             gboolean     at_ret)
{
  bus_mcast_bpf_label_place (bpf, label);
  if (!at_ret)
    bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_IMM, 0);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, kept);
}

/* Lays the program out, which must work, and frees @bpf; returns how many
 * instructions the layout added */
static int
finish (BusMcastBpf       *bpf,
        struct sock_fprog *program)
{
  int emitted = bus_mcast_bpf_get_length (bpf);
  dbus_bool_t oom = TRUE;

  g_assert_true (bus_mcast_bpf_finish (bpf, program, &oom));
  g_assert_false (oom);
  g_assert_nonnull (program->filter);
  g_assert_cmpint (program->len, >=, emitted);
  g_assert_cmpint (program->len, <=, BPF_MAXINSNS);
  bus_mcast_bpf_free (bpf);
  return program->len - emitted;
}

/* Laying the program out must fail, for lack of memory or not */
static void
finish_fails (BusMcastBpf *bpf,
              dbus_bool_t  for_oom)
{
  struct sock_fprog program;
  dbus_bool_t oom = !for_oom;

  g_assert_false (bus_mcast_bpf_finish (bpf, &program, &oom));
  g_assert_cmpint (oom, ==, for_oom);
  g_assert_null (program.filter);
  bus_mcast_bpf_free (bpf);
}

static void
assert_insn (const struct sock_filter *insn,
             unsigned short            code,
             dbus_uint32_t             k)
{
  g_assert_cmphex (insn->code, ==, code);
  g_assert_cmpuint (insn->k, ==, k);
}

static void
assert_jump (const struct sock_filter *insn,
             unsigned short            code,
             int                       jt,
             int                       jf)
{
  g_assert_cmphex (insn->code, ==, code);
  g_assert_cmpint (insn->jt, ==, jt);
  g_assert_cmpint (insn->jf, ==, jf);
}

/* ---- Running in the kernel ---------------------------------------------- */

/* Attaches @program to the receiving end of a datagram socket pair and
 * checks what it keeps of packets: @first_byte, then how many bytes of a
 * packet starting with it must arrive (0: none), and so on, ending
 * with -1.  Frees the program. */
static void
assert_kept (struct sock_fprog *program,
             int                first_byte,
             ...)
{
  int sv[2];    /* send on 0, the program runs on 1 */
  va_list ap;

  g_assert_cmpint (socketpair (AF_UNIX, SOCK_DGRAM, 0, sv), ==, 0);
  if (setsockopt (sv[1], SOL_SOCKET, SO_ATTACH_FILTER,
                  program, sizeof (*program)) != 0)
    g_error ("SO_ATTACH_FILTER (%u instructions): %s", program->len,
             g_strerror (errno));

  va_start (ap, first_byte);
  for (; first_byte >= 0; first_byte = va_arg (ap, int))
    {
      int kept = va_arg (ap, int);
      guint8 packet[PACKET_SIZE];
      guint8 buf[PACKET_SIZE + 1];
      ssize_t n;

      memset (packet, 0xa5, sizeof (packet));
      packet[0] = first_byte;
      g_assert_cmpint (send (sv[0], packet, sizeof (packet), 0), ==,
                       sizeof (packet));
      n = recv (sv[1], buf, sizeof (buf), MSG_DONTWAIT);
      if (n < 0)
        {
          g_assert_cmpint (errno, ==, EAGAIN);
          n = 0;
        }
      if (n != kept)
        g_error ("a packet starting with %d: %d bytes kept, not %d",
                 first_byte, (int) n, kept);
      g_assert_true (memcmp (buf, packet, n) == 0);
    }
  va_end (ap);

  close (sv[0]);
  close (sv[1]);
  dbus_free (program->filter);
}

/* ---- Jumps in range ----------------------------------------------------- */

/* A program of two jumps:
 *     ldb [0]
 *     jeq #1, first, next
 *     jgt #9, second, next
 *     ret #1
 *     (@first_gap instructions)
 *   first: (ldx #0, unless @first_at_ret)
 *     ret #2
 *     (@second_gap instructions)
 *   second: ldx #0
 *     ret #3 */
static BusMcastBpf *
two_jumps_program (int      first_gap,
                   gboolean first_at_ret,
                   int      second_gap)
{
  BusMcastBpf *bpf = bpf_new ();
  int first = bus_mcast_bpf_label_new (bpf);
  int second = bus_mcast_bpf_label_new (bpf);

  emit_load_first_byte (bpf);
  emit_jump_if (bpf, BPF_JEQ, 1, first);
  emit_jump_if (bpf, BPF_JGT, 9, second);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, 1);
  emit_padding (bpf, first_gap);
  emit_target (bpf, first, 2, first_at_ret);
  emit_padding (bpf, second_gap);
  emit_target (bpf, second, 3, FALSE);
  return bpf;
}

/* Conditional jumps whose targets are at most 255 instructions away are
 * one instruction each, the offsets in jt and jf, up to 255 exactly */
static void
test_short_jumps (void)
{
  struct sock_fprog program;

  g_assert_cmpint (finish (two_jumps_program (0, TRUE, 253), &program),
                   ==, 0);
  assert_jump (&program.filter[1], BPF_JMP | BPF_JEQ | BPF_K, 2, 0);
  assert_jump (&program.filter[2], BPF_JMP | BPF_JGT | BPF_K, 255, 0);
  assert_kept (&program, 1, 2, 10, 3, 255, 3, 0, 1, 2, 1, 9, 1, -1);
}

/* ---- Long jumps --------------------------------------------------------- */

/* A program of the form
 *     ldb [0]
 *     jeq #1, yes, no
 *     (padding)
 *   first:  (ldx #0)  ret #KEPT_FIRST
 *     (padding)
 *   second: (ldx #0)  ret #KEPT_SECOND
 * where first and second are yes and no, in either order. */
typedef struct
{
  const char *name;
  gboolean yes_first;   /* the true target is the nearer one */
  int first;            /* instructions between the jump and the targets, */
  int second;           /* as emitted */
  gboolean at_ret;      /* the targets are their returns, without ldx */
  int size;             /* instructions the jump takes once laid out */
} LongJump;

#define KEPT_FIRST 5
#define KEPT_SECOND 7

static const LongJump long_jumps[] = {
  { "both-in-range", FALSE, 200, 255, FALSE, 1 },
  /* the far one moves the near one from 254 to 255 */
  { "true-far", FALSE, 254, 256, FALSE, 2 },
  { "false-far", TRUE, 254, 256, FALSE, 2 },
  /* the far one moves the near one from 255 to 256: both go far */
  { "near-pushed-out", TRUE, 255, 256, FALSE, 3 },
  { "both-far", FALSE, 256, 300, FALSE, 3 },
  { "true-far-to-ret", FALSE, 254, 256, TRUE, 2 },
  { "false-far-to-ret", TRUE, 254, 256, TRUE, 2 },
  { "both-far-to-ret", TRUE, 300, 600, TRUE, 3 }
};

static void
test_long_jump (gconstpointer data)
{
  const LongJump *c = data;
  BusMcastBpf *bpf = bpf_new ();
  int first = bus_mcast_bpf_label_new (bpf);
  int second = bus_mcast_bpf_label_new (bpf);
  int target_size = c->at_ret ? 1 : 2;
  int yes = c->yes_first ? first : second;
  int no = c->yes_first ? second : first;
  int near = c->first + c->size - 1;    /* offset of first, laid out */
  struct sock_fprog program;
  const struct sock_filter *insn;
  int i;

  emit_load_first_byte (bpf);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, 1, yes, no);
  emit_padding (bpf, c->first);
  emit_target (bpf, first, KEPT_FIRST, c->at_ret);
  emit_padding (bpf, c->second - c->first - target_size);
  emit_target (bpf, second, KEPT_SECOND, c->at_ret);

  g_assert_cmpint (finish (bpf, &program), ==, c->size - 1);
  insn = &program.filter[1];
  if (c->size == 1)
    assert_jump (insn, BPF_JMP | BPF_JEQ | BPF_K,
                 c->yes_first ? c->first : c->second,
                 c->yes_first ? c->second : c->first);
  else if (c->size == 2)
    assert_jump (insn, BPF_JMP | BPF_JEQ | BPF_K,
                 c->yes_first ? near : 0, c->yes_first ? 0 : near);
  else
    assert_jump (insn, BPF_JMP | BPF_JEQ | BPF_K, 0, 1);

  /* what the extra instructions are: the jump to the far target, or its
   * return (in the 3-instruction form: true, then false) */
  for (i = 1; i < c->size; i++)
    {
      gboolean to_yes = c->size == 3 ? i == 1 : !c->yes_first;
      gboolean to_first = to_yes == c->yes_first;

      if (c->at_ret)
        assert_insn (&insn[i], BPF_RET | BPF_K,
                     to_first ? KEPT_FIRST : KEPT_SECOND);
      else
        g_assert_cmphex (insn[i].code, ==, BPF_JMP | BPF_JA);
    }

  assert_kept (&program,
               1, c->yes_first ? KEPT_FIRST : KEPT_SECOND,
               0, c->yes_first ? KEPT_SECOND : KEPT_FIRST,
               2, c->yes_first ? KEPT_SECOND : KEPT_FIRST,
               -1);
}

/* One jump going long moves the target of an earlier one out of range:
 * the layout is repeated until nothing moves */
static void
test_long_jump_cascade (void)
{
  struct sock_fprog program;

  /* first is 255 away as emitted, 256 once the second jump has its
   * BPF_JA */
  g_assert_cmpint (finish (two_jumps_program (253, FALSE, 10), &program),
                   ==, 2);
  assert_jump (&program.filter[1], BPF_JMP | BPF_JEQ | BPF_K, 0, 1);
  assert_insn (&program.filter[2], BPF_JMP | BPF_JA, 256);
  assert_jump (&program.filter[3], BPF_JMP | BPF_JGT | BPF_K, 0, 1);
  assert_insn (&program.filter[4], BPF_JMP | BPF_JA, 266);
  assert_kept (&program, 1, 2, 10, 3, 0, 1, 9, 1, -1);
}

/* 100 conditional jumps, each to its own target beyond the padding: all
 * go through a BPF_JA, and each gets where it should */
#define N_LADDER 100

static void
emit_ladder (BusMcastBpf *bpf)
{
  int labels[N_LADDER];
  int i;

  for (i = 0; i < N_LADDER; i++)
    labels[i] = bus_mcast_bpf_label_new (bpf);

  emit_load_first_byte (bpf);
  for (i = 0; i < N_LADDER; i++)
    emit_jump_if (bpf, BPF_JEQ, i, labels[i]);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, 1);
  emit_padding (bpf, 300);
  for (i = 0; i < N_LADDER; i++)
    emit_target (bpf, labels[i], 2 + i % 20, i % 2 == 0);
}

static void
test_ladder (void)
{
  BusMcastBpf *bpf = bpf_new ();
  struct sock_fprog program;

  emit_ladder (bpf);
  g_assert_cmpint (finish (bpf, &program), ==, N_LADDER);
  assert_kept (&program, 0, 2, 1, 3, 19, 21, 20, 2, 57, 19, 98, 20, 99, 21,
               100, 1, 255, 1, -1);
}

/* ---- BPF_JA ------------------------------------------------------------- */

/* A BPF_JA to a label before a BPF_RET is that BPF_RET (ret #k or ret a);
 * one to anything else stays a jump */
static void
test_ja (void)
{
  BusMcastBpf *bpf = bpf_new ();
  int other = bus_mcast_bpf_label_new (bpf);
  int last = bus_mcast_bpf_label_new (bpf);
  int ret_k = bus_mcast_bpf_label_new (bpf);
  int ret_a = bus_mcast_bpf_label_new (bpf);
  int ldx = bus_mcast_bpf_label_new (bpf);
  struct sock_fprog program;

  emit_load_first_byte (bpf);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, 1,
                           BUS_MCAST_BPF_NEXT, other);
  bus_mcast_bpf_emit_ja (bpf, ret_k);
  bus_mcast_bpf_label_place (bpf, other);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, 2,
                           BUS_MCAST_BPF_NEXT, last);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_IMM, 3);
  bus_mcast_bpf_emit_ja (bpf, ret_a);
  bus_mcast_bpf_label_place (bpf, last);
  bus_mcast_bpf_emit_ja (bpf, ldx);
  bus_mcast_bpf_label_place (bpf, ret_k);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, 5);
  bus_mcast_bpf_label_place (bpf, ret_a);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_A, 0);
  bus_mcast_bpf_label_place (bpf, ldx);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_IMM, 0);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, 2);

  g_assert_cmpint (finish (bpf, &program), ==, 0);
  assert_insn (&program.filter[2], BPF_RET | BPF_K, 5);
  assert_insn (&program.filter[5], BPF_RET | BPF_A, 0);
  assert_insn (&program.filter[6], BPF_JMP | BPF_JA, 2);
  assert_kept (&program, 1, 5, 2, 3, 0, 2, -1);
}

/* ---- Size --------------------------------------------------------------- */

/* A program of @emitted instructions whose one jump goes long:
 *     ldb [0]
 *     jeq #1, far, next
 *     ret #2
 *     (padding)
 *   far: ldx #0
 *     ret #1 */
static BusMcastBpf *
long_jump_program (int emitted)
{
  BusMcastBpf *bpf = bpf_new ();
  int far = bus_mcast_bpf_label_new (bpf);

  emit_load_first_byte (bpf);
  emit_jump_if (bpf, BPF_JEQ, 1, far);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, 2);
  emit_padding (bpf, emitted - 5);
  emit_target (bpf, far, 1, FALSE);
  g_assert_cmpint (bus_mcast_bpf_get_length (bpf), ==, emitted);
  return bpf;
}

/* BPF_MAXINSNS instructions fit, one more does not (and is not even
 * stored), and neither does a program that the layout makes bigger */
static void
test_too_big (void)
{
  BusMcastBpf *bpf;
  struct sock_fprog program;

  bpf = bpf_new ();
  emit_padding (bpf, BPF_MAXINSNS - 1);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, 4);
  g_assert_cmpint (finish (bpf, &program), ==, 0);
  g_assert_cmpint (program.len, ==, BPF_MAXINSNS);
  assert_kept (&program, 0, 4, -1);

  bpf = bpf_new ();
  emit_padding (bpf, BPF_MAXINSNS);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, 4);
  g_assert_cmpint (bus_mcast_bpf_get_length (bpf), ==, BPF_MAXINSNS);
  finish_fails (bpf, FALSE);

  finish_fails (long_jump_program (BPF_MAXINSNS), FALSE);

  g_assert_cmpint (finish (long_jump_program (BPF_MAXINSNS - 1), &program),
                   ==, 1);
  g_assert_cmpint (program.len, ==, BPF_MAXINSNS);
  assert_kept (&program, 1, 1, 0, 2, -1);
}

/* ---- Labels ------------------------------------------------------------- */

/* Placing a label wrongly is a programming error, caught by assertions */
typedef enum
{
  LABEL_PLACED_TWICE,
  LABEL_BEFORE_JUMP,
  LABEL_NOT_PLACED
} LabelError;

#ifdef DBUS_ENABLE_ASSERT
/* Makes @error; returns only if no assertion caught it */
static void
misplace_label (LabelError error)
{
  BusMcastBpf *bpf = bpf_new ();
  int label = bus_mcast_bpf_label_new (bpf);
  struct sock_fprog program;
  dbus_bool_t oom;

  if (error == LABEL_PLACED_TWICE)
    {
      bus_mcast_bpf_label_place (bpf, label);
      bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, 0);
      bus_mcast_bpf_label_place (bpf, label);
      return;
    }

  if (error == LABEL_BEFORE_JUMP)
    bus_mcast_bpf_label_place (bpf, label);
  bus_mcast_bpf_emit_ja (bpf, label);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, 0);
  bus_mcast_bpf_finish (bpf, &program, &oom);
}
#endif

static void
test_label_error (gconstpointer data)
{
#ifdef DBUS_ENABLE_ASSERT
  if (!g_test_undefined ())
    {
      g_test_skip ("Not testing programming errors");
    }
  else if (g_test_subprocess ())
    {
      g_unsetenv ("DBUS_BLOCK_ON_ABORT");
      misplace_label (GPOINTER_TO_INT (data));
    }
  else
    {
      g_test_trap_subprocess (NULL, 0, 0);
      g_test_trap_assert_failed ();
      g_test_trap_assert_stderr ("*assertion failed*");
    }
#else
  g_test_skip ("Assertions disabled");
#endif
}

/* ---- Out of memory ------------------------------------------------------ */

/* Once the caller reports a failed allocation, nothing more is emitted
 * and the layout fails */
static void
test_caller_oom (void)
{
  BusMcastBpf *bpf = bpf_new ();

  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, 0);
  bus_mcast_bpf_set_oom (bpf);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, 0);
  g_assert_cmpint (bus_mcast_bpf_get_length (bpf), ==, 1);
  finish_fails (bpf, TRUE);
}

/* Assembles the ladder (the instructions and the labels are reallocated
 * as they grow, then the layout and the program allocated); with
 * allocations failing, it either comes out as it does with memory, or
 * fails for lack of memory, and nothing leaks (oom_loop_run checks) */
static dbus_bool_t
assemble_ladder (void        *data,
                 dbus_bool_t  have_memory)
{
  const struct sock_fprog *expected = data;
  BusMcastBpf *bpf = bus_mcast_bpf_new ();
  struct sock_fprog program;
  dbus_bool_t oom;

  if (bpf == NULL)
    {
      g_assert_false (have_memory);
      return TRUE;
    }

  emit_ladder (bpf);
  if (bus_mcast_bpf_finish (bpf, &program, &oom))
    {
      g_assert_cmpint (program.len, ==, expected->len);
      g_assert_true (memcmp (program.filter, expected->filter,
                             sizeof (struct sock_filter) * program.len) == 0);
      dbus_free (program.filter);
    }
  else
    {
      g_assert_false (have_memory);
      g_assert_true (oom);
    }
  bus_mcast_bpf_free (bpf);
  return TRUE;
}

static void
test_oom (void)
{
  BusMcastBpf *bpf = bpf_new ();
  struct sock_fprog expected;

  emit_ladder (bpf);
  finish (bpf, &expected);
  oom_loop_run ("assemble", assemble_ladder, &expected);
  dbus_free (expected.filter);
}

int
main (int    argc,
      char **argv)
{
  gsize i;

  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/mcast-bpf/short-jumps", test_short_jumps);
  for (i = 0; i < G_N_ELEMENTS (long_jumps); i++)
    {
      gchar *path = g_strdup_printf ("/mcast-bpf/long-jump/%s",
                                     long_jumps[i].name);

      g_test_add_data_func (path, &long_jumps[i], test_long_jump);
      g_free (path);
    }
  g_test_add_func ("/mcast-bpf/long-jump/cascade", test_long_jump_cascade);
  g_test_add_func ("/mcast-bpf/long-jump/ladder", test_ladder);
  g_test_add_func ("/mcast-bpf/ja", test_ja);
  g_test_add_func ("/mcast-bpf/too-big", test_too_big);
  g_test_add_data_func ("/mcast-bpf/label/placed-twice",
                        GINT_TO_POINTER (LABEL_PLACED_TWICE),
                        test_label_error);
  g_test_add_data_func ("/mcast-bpf/label/before-jump",
                        GINT_TO_POINTER (LABEL_BEFORE_JUMP),
                        test_label_error);
  g_test_add_data_func ("/mcast-bpf/label/not-placed",
                        GINT_TO_POINTER (LABEL_NOT_PLACED),
                        test_label_error);
  g_test_add_func ("/mcast-bpf/oom/caller", test_caller_oom);
  g_test_add_func ("/mcast-bpf/oom/allocations", test_oom);

  return g_test_run ();
}
