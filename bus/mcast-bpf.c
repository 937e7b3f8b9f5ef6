/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-bpf.c  A classic BPF assembler: instructions with symbolic forward
 *              jumps, laid out into a socket filter program
 *
 * See mcast-bpf.h for what this module is for.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "mcast-bpf.h"

#include <dbus/dbus-internals.h>

#define UNPLACED (-1)   /* the index of a label not placed yet */

typedef struct
{
  struct sock_filter insn;
  int jt, jf;           /* labels of a conditional jump */
  int target;           /* label of a BPF_JA */
  int size;             /* 1, or 2-3 with the BPF_JA after it */
} Insn;

struct BusMcastBpf
{
  Insn *insns;
  int n_insns;
  int allocated;
  int *labels;          /* label -> index of the instruction it precedes */
  int n_labels;
  int labels_allocated;
  dbus_bool_t oom;
  dbus_bool_t too_big;
};

BusMcastBpf *
bus_mcast_bpf_new (void)
{
  return dbus_new0 (BusMcastBpf, 1);
}

void
bus_mcast_bpf_free (BusMcastBpf *bpf)
{
  if (bpf == NULL)
    return;

  dbus_free (bpf->insns);
  dbus_free (bpf->labels);
  dbus_free (bpf);
}

int
bus_mcast_bpf_label_new (BusMcastBpf *bpf)
{
  if (bpf->n_labels == bpf->labels_allocated)
    {
      int n = bpf->labels_allocated ? bpf->labels_allocated * 2 : 64;
      int *labels = dbus_realloc (bpf->labels, sizeof (int) * n);

      if (labels == NULL)
        {
          bpf->oom = TRUE;
          return BUS_MCAST_BPF_NEXT;
        }
      bpf->labels = labels;
      bpf->labels_allocated = n;
    }
  bpf->labels[bpf->n_labels] = UNPLACED;
  return bpf->n_labels++;
}

void
bus_mcast_bpf_label_place (BusMcastBpf *bpf,
                           int          label)
{
  if (label < 0)
    return;     /* from a failed bus_mcast_bpf_label_new() */

  _dbus_assert (label < bpf->n_labels);
  _dbus_assert (bpf->labels[label] == UNPLACED);
  bpf->labels[label] = bpf->n_insns;
}

static void
emit (BusMcastBpf    *bpf,
      unsigned short  code,
      dbus_uint32_t   k,
      int             jt,
      int             jf,
      int             target)
{
  Insn *insn;

  if (bpf->oom || bpf->too_big)
    return;

  /* Laying out only adds instructions: stop as soon as it cannot fit. */
  if (bpf->n_insns >= BPF_MAXINSNS)
    {
      bpf->too_big = TRUE;
      return;
    }

  if (bpf->n_insns == bpf->allocated)
    {
      int n = bpf->allocated ? bpf->allocated * 2 : 256;
      Insn *insns = dbus_realloc (bpf->insns, sizeof (Insn) * n);

      if (insns == NULL)
        {
          bpf->oom = TRUE;
          return;
        }
      bpf->insns = insns;
      bpf->allocated = n;
    }

  insn = &bpf->insns[bpf->n_insns++];
  insn->insn.code = code;
  insn->insn.k = k;
  insn->insn.jt = 0;
  insn->insn.jf = 0;
  insn->jt = jt;
  insn->jf = jf;
  insn->target = target;
  insn->size = 1;
}

void
bus_mcast_bpf_emit_stmt (BusMcastBpf    *bpf,
                         unsigned short  code,
                         dbus_uint32_t   k)
{
  _dbus_assert (BPF_CLASS (code) != BPF_JMP);
  emit (bpf, code, k, BUS_MCAST_BPF_NEXT, BUS_MCAST_BPF_NEXT,
        BUS_MCAST_BPF_NEXT);
}

void
bus_mcast_bpf_emit_jump (BusMcastBpf    *bpf,
                         unsigned short  code,
                         dbus_uint32_t   k,
                         int             jt,
                         int             jf)
{
  _dbus_assert (BPF_CLASS (code) == BPF_JMP && BPF_OP (code) != BPF_JA);
  emit (bpf, code, k, jt, jf, BUS_MCAST_BPF_NEXT);
}

void
bus_mcast_bpf_emit_ja (BusMcastBpf *bpf,
                       int          label)
{
  emit (bpf, BPF_JMP | BPF_JA, 0, BUS_MCAST_BPF_NEXT, BUS_MCAST_BPF_NEXT,
        label);
}

int
bus_mcast_bpf_get_length (BusMcastBpf *bpf)
{
  return bpf->n_insns;
}

void
bus_mcast_bpf_set_oom (BusMcastBpf *bpf)
{
  bpf->oom = TRUE;
}

static dbus_bool_t
is_ja (const struct sock_filter *insn)
{
  return BPF_CLASS (insn->code) == BPF_JMP && BPF_OP (insn->code) == BPF_JA;
}

static dbus_bool_t
is_conditional (const struct sock_filter *insn)
{
  return BPF_CLASS (insn->code) == BPF_JMP && BPF_OP (insn->code) != BPF_JA;
}

/* Address of a label, for an instruction at address @at of size @size */
static int
label_address (BusMcastBpf *bpf,
               const int   *addresses,
               int          label,
               int          at,
               int          size)
{
  int address;

  if (label == BUS_MCAST_BPF_NEXT)
    return at + size;

  _dbus_assert (label >= 0 && label < bpf->n_labels);
  _dbus_assert (bpf->labels[label] != UNPLACED);
  _dbus_assert (bpf->labels[label] < bpf->n_insns);
  address = addresses[bpf->labels[label]];
  _dbus_assert (address >= at + size);      /* forward only */
  return address;
}

/* A BPF_JA to @label at address @at, or the BPF_RET it leads to */
static struct sock_filter
jump_to (BusMcastBpf *bpf,
         const int   *addresses,
         int          label,
         int          at)
{
  struct sock_filter insn = { BPF_JMP | BPF_JA, 0, 0, 0 };
  int address = label_address (bpf, addresses, label, at, 1);

  if (label != BUS_MCAST_BPF_NEXT
      && BPF_CLASS (bpf->insns[bpf->labels[label]].insn.code) == BPF_RET)
    return bpf->insns[bpf->labels[label]].insn;

  insn.k = address - at - 1;
  return insn;
}

dbus_bool_t
bus_mcast_bpf_finish (BusMcastBpf       *bpf,
                      struct sock_fprog *program,
                      dbus_bool_t       *oom)
{
  int *addresses;
  dbus_bool_t changed;
  int i, n, at;

  program->filter = NULL;
  program->len = 0;
  *oom = FALSE;

  if (bpf->oom || bpf->too_big)
    goto failed;

  addresses = dbus_new (int, bpf->n_insns + 1);
  if (addresses == NULL)
    {
      bpf->oom = TRUE;
      goto failed;
    }

  /* Sizes only grow, so this terminates. */
  do
    {
      changed = FALSE;
      at = 0;
      for (i = 0; i < bpf->n_insns; i++)
        {
          addresses[i] = at;
          at += bpf->insns[i].size;
        }
      addresses[bpf->n_insns] = at;

      for (i = 0; i < bpf->n_insns; i++)
        {
          Insn *insn = &bpf->insns[i];
          int t, f, need;

          if (!is_conditional (&insn->insn))
            continue;
          at = addresses[i];
          t = label_address (bpf, addresses, insn->jt, at, insn->size)
            - at - 1;
          f = label_address (bpf, addresses, insn->jf, at, insn->size)
            - at - 1;
          if (t <= 255 && f <= 255)
            need = 1;
          else if (t <= 255 || f <= 255)
            need = 2;
          else
            need = 3;
          if (need > insn->size)
            {
              insn->size = need;
              changed = TRUE;
            }
        }
    }
  while (changed);

  n = addresses[bpf->n_insns];
  if (n > BPF_MAXINSNS)
    {
      dbus_free (addresses);
      bpf->too_big = TRUE;
      goto failed;
    }

  program->filter = dbus_new (struct sock_filter, n);
  if (program->filter == NULL)
    {
      dbus_free (addresses);
      bpf->oom = TRUE;
      goto failed;
    }
  program->len = n;

  for (i = 0; i < bpf->n_insns; i++)
    {
      Insn *insn = &bpf->insns[i];
      struct sock_filter *out = &program->filter[addresses[i]];

      at = addresses[i];
      *out = insn->insn;
      if (is_ja (&insn->insn))
        {
          *out = jump_to (bpf, addresses, insn->target, at);
        }
      else if (is_conditional (&insn->insn))
        {
          int t = label_address (bpf, addresses, insn->jt, at, insn->size);
          int f = label_address (bpf, addresses, insn->jf, at, insn->size);

          if (insn->size == 1)
            {
              out->jt = t - at - 1;
              out->jf = f - at - 1;
            }
          else if (insn->size == 2 && f - at - 1 <= 255)
            {
              /* true: through the BPF_JA */
              out->jt = 0;
              out->jf = f - at - 1;
              out[1] = jump_to (bpf, addresses, insn->jt, at + 1);
            }
          else if (insn->size == 2)
            {
              out->jt = t - at - 1;
              out->jf = 0;
              out[1] = jump_to (bpf, addresses, insn->jf, at + 1);
            }
          else
            {
              out->jt = 0;
              out->jf = 1;
              out[1] = jump_to (bpf, addresses, insn->jt, at + 1);
              out[2] = jump_to (bpf, addresses, insn->jf, at + 2);
            }
        }
    }

  dbus_free (addresses);
  return TRUE;

failed:
  *oom = bpf->oom;
  return FALSE;
}
