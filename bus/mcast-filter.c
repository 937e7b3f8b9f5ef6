/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-filter.c  The match-to-BPF compiler: what a socket of the multicast
 *                 group may receive, as a classic BPF program
 *
 * What this module is for: see mcast-filter.h.  The layout of the programs
 * it writes (header walk, scratch words, per-kind logic, loosening) is
 * described in doc/mcast-filter.md.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "mcast-filter.h"

#include <stdlib.h>
#include <string.h>

#include <dbus/dbus-internals.h>
#include <dbus/dbus-mcast-uapi.h>
#include <dbus/dbus-seqpacket-io.h>

#include "mcast-bpf.h"
#include "utils.h"

/* ---- What the program passes with, and the message layout -------------- */

/* A socket filter's return value is the number of bytes to keep.  A
 * member's peer filter claims a message addressed to one of its names
 * (UNIX_PEER_ADDRESSEE, which keeps it whole too): the kernel then tells
 * the sender which member got it (UNIX_GROUP_SENT_TO). */
#define PASS_VALUE 0xffffffffu
#define DROP_VALUE 0u
#ifdef DBUS_HAVE_MCAST_UAPI
#define ADDRESSEE_VALUE UNIX_PEER_ADDRESSEE
/* The daemon's copy of a message with a destination: only if no member's
 * filter claimed it (the destination is no member's name) */
#define UNCLAIMED_VALUE UNIX_COPY_UNCLAIMED
#else
#define ADDRESSEE_VALUE PASS_VALUE /* no group to claim anything in */
#define UNCLAIMED_VALUE PASS_VALUE
#endif

/* Every known header field appears at most once in a valid message, so this
 * many cover every message a member may receive from the group (one with
 * an unknown field goes through the daemon, see emit_header_walk()). */
#define MAX_FIELDS 9

/* Scratch words (M[]) */
enum
{
  M_FIELDS_END,     /* 16 + length of the header field array */
  M_BODY,           /* offset of the body */
  M_DESTINATION,    /* offsets of the header fields, or ABSENT */
  M_SENDER,
  M_PATH,
  M_INTERFACE,
  M_MEMBER,
  M_SIGNATURE,
  M_ARG0_STRING,    /* arg0 as a field-like base if it is a string, or ABSENT */
  M_ARG0_PATH,      /* same if it is a string or an object path */
  M_TEMP
};

/* The offset recorded for an absent field.  A field at offset o has its
 * (little-endian) length at o + 4; at ABSENT + 4 are the high bytes of the
 * field array length, which the header check requires to be zero, so an
 * absent field reads as an empty string and never equals a name. */
#define ABSENT 10

/* The first 4 bytes of a header field (code, signature length 1, type,
 * nul), as a big-endian word load reads them */
#define FIELD_WORD(code, type) \
  (((dbus_uint32_t) (code) << 24) | (1u << 16) | ((dbus_uint32_t) (type) << 8))

/* The little-endian 16-bit value v as a big-endian halfword load reads it */
#define SWAP16(v) ((((v) & 0xffu) << 8) | (((v) >> 8) & 0xffu))

/* ---- Description ------------------------------------------------------- */

typedef struct
{
  DBusMatchRule *rule;
  char *sender;     /* the SENDER value the rule wants, or NULL for any */
} BusMcastRule;

struct BusMcastFilter
{
  BusMcastFilterKind kind;
  dbus_bool_t accept_all;
  char **names;
  int n_names;
  BusMcastRule *rules;
  int n_rules;
};

BusMcastFilter *
bus_mcast_filter_new (BusMcastFilterKind kind)
{
  BusMcastFilter *filter;

  filter = dbus_new0 (BusMcastFilter, 1);
  if (filter == NULL)
    return NULL;

  filter->kind = kind;
  return filter;
}

void
bus_mcast_filter_free (BusMcastFilter *filter)
{
  int i;

  if (filter == NULL)
    return;

  for (i = 0; i < filter->n_names; i++)
    dbus_free (filter->names[i]);
  for (i = 0; i < filter->n_rules; i++)
    dbus_free (filter->rules[i].sender);
  dbus_free (filter->names);
  dbus_free (filter->rules);
  dbus_free (filter);
}

dbus_bool_t
bus_mcast_filter_add_name (BusMcastFilter *filter,
                           const char     *name)
{
  char **names;
  char *copy;

  _dbus_assert (filter->kind == BUS_MCAST_FILTER_MEMBER);
  copy = _dbus_strdup (name);
  if (copy == NULL)
    return FALSE;

  names = dbus_realloc (filter->names,
                        sizeof (char *) * (filter->n_names + 1));
  if (names == NULL)
    {
      dbus_free (copy);
      return FALSE;
    }

  filter->names = names;
  filter->names[filter->n_names++] = copy;
  return TRUE;
}

dbus_bool_t
bus_mcast_filter_add_rule (BusMcastFilter *filter,
                           DBusMatchRule  *rule,
                           const char     *sender_owner)
{
  BusMcastRule *rules;
  const char *sender = NULL;
  char *copy = NULL;

  if (rule->flags & DBUS_MATCH_SENDER)
    {
      if (rule->sender[0] == ':')
        sender = rule->sender;
      else if (sender_owner != NULL)
        sender = sender_owner;
      else
        return TRUE;    /* nobody owns the name: the rule matches nothing */

      copy = _dbus_strdup (sender);
      if (copy == NULL)
        return FALSE;
    }

  rules = dbus_realloc (filter->rules,
                        sizeof (BusMcastRule) * (filter->n_rules + 1));
  if (rules == NULL)
    {
      dbus_free (copy);
      return FALSE;
    }

  filter->rules = rules;
  filter->rules[filter->n_rules].rule = rule;
  filter->rules[filter->n_rules].sender = copy;
  filter->n_rules++;
  return TRUE;
}

void
bus_mcast_filter_accept_all (BusMcastFilter *filter)
{
  filter->accept_all = TRUE;
}

void
bus_mcast_program_clear (BusMcastProgram *program)
{
  dbus_free (program->insns);
  program->insns = NULL;
  program->len = 0;
}

/* ---- Building blocks ----------------------------------------------------- */

/* A = the little-endian 16-bit value at [X + k] */
static void
emit_load_le16 (BusMcastBpf  *bpf,
                dbus_uint32_t k)
{
  /* ab * 0x10001 = abab; >> 8 & 0xffff = ba */
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_H | BPF_IND, k);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_MUL | BPF_K, 0x10001);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_RSH | BPF_K, 8);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_AND | BPF_K, 0xffff);
}

/* Bytes compared at once: words, then a halfword and a byte */
static int
chunk_size (int len,
            int offset)
{
  int rest = len - offset;

  return rest >= 4 ? 4 : rest >= 2 ? 2 : 1;
}

static dbus_uint32_t
chunk_value (const char *s,
             int         offset,
             int         size)
{
  dbus_uint32_t v = 0;
  int i;

  for (i = 0; i < size; i++)
    v = (v << 8) | (unsigned char) s[offset + i];
  return v;
}

static unsigned short
chunk_load (int size)
{
  return BPF_LD | BPF_IND | (size == 4 ? BPF_W : size == 2 ? BPF_H : BPF_B);
}

/* The first @len bytes of the string whose field starts at X (bytes at
 * X + 8) equal @s, or go to @fail */
static void
emit_prefix_test (BusMcastBpf *bpf,
                  const char  *s,
                  int          len,
                  int          fail)
{
  int offset, size;

  for (offset = 0; offset < len; offset += size)
    {
      size = chunk_size (len, offset);
      bus_mcast_bpf_emit_stmt (bpf, chunk_load (size), 8 + offset);
      bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K,
                               chunk_value (s, offset, size),
                               BUS_MCAST_BPF_NEXT, fail);
    }
}

/* The string whose field starts at X equals @s, or go to @fail.  The
 * length is compared first, so no byte beyond the string is read. */
static void
emit_string_test (BusMcastBpf *bpf,
                  const char  *s,
                  int          fail)
{
  size_t len = strlen (s);

  if (len > 0xffff)
    {
      /* longer than any string of a filtered packet */
      bus_mcast_bpf_emit_ja (bpf, fail);
      return;
    }
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_H | BPF_IND, 4);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, SWAP16 (len),
                           BUS_MCAST_BPF_NEXT, fail);
  emit_prefix_test (bpf, s, len, fail);
}

/* The string at X is @s or starts with @s followed by @separator (the
 * namespace matches of path_namespace and arg0namespace), or go to @fail */
static void
emit_namespace_test (BusMcastBpf *bpf,
                     const char  *s,
                     char         separator,
                     int          fail)
{
  size_t len = strlen (s);
  int compare = bus_mcast_bpf_label_new (bpf);

  if (len > 0xffff)
    {
      bus_mcast_bpf_emit_ja (bpf, fail);
      return;
    }
  emit_load_le16 (bpf, 4);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, len, compare,
                           BUS_MCAST_BPF_NEXT);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JGT | BPF_K, len,
                           BUS_MCAST_BPF_NEXT, fail);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_B | BPF_IND, 8 + len);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K,
                           (unsigned char) separator,
                           BUS_MCAST_BPF_NEXT, fail);
  bus_mcast_bpf_label_place (bpf, compare);
  emit_prefix_test (bpf, s, len, fail);
}

/* argNpath semantics (bus/signals.c): equal; or @s ends with '/' and is a
 * prefix of the argument; or the argument ends with '/' and is a prefix
 * of @s.  The argument is at X. */
static void
emit_arg_path_test (BusMcastBpf *bpf,
                    const char  *s,
                    int          fail)
{
  size_t len = strlen (s);
  int full = bus_mcast_bpf_label_new (bpf);
  int done = bus_mcast_bpf_label_new (bpf);
  size_t k;

  if (len == 0 || len > 0xffff)
    {
      bus_mcast_bpf_emit_ja (bpf, fail);
      return;
    }
  emit_load_le16 (bpf, 4);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, len, full,
                           BUS_MCAST_BPF_NEXT);
  if (s[len - 1] == '/')
    bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JGT | BPF_K, len, full,
                             BUS_MCAST_BPF_NEXT);
  /* a shorter argument ending in '/' at one of the slashes of s */
  for (k = 1; k < len; k++)
    {
      int next;

      if (s[k - 1] != '/')
        continue;
      next = bus_mcast_bpf_label_new (bpf);
      bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, k,
                               BUS_MCAST_BPF_NEXT, next);
      emit_prefix_test (bpf, s, k, fail);
      bus_mcast_bpf_emit_ja (bpf, done);
      bus_mcast_bpf_label_place (bpf, next);
      emit_load_le16 (bpf, 4);
    }
  bus_mcast_bpf_emit_ja (bpf, fail);
  bus_mcast_bpf_label_place (bpf, full);
  emit_prefix_test (bpf, s, len, fail);
  bus_mcast_bpf_label_place (bpf, done);
}

/* ---- Header check and walk ------------------------------------------------ */

/* What the header walk does with a field, other than recording it in a
 * scratch word (M_*) */
#define FIELD_SKIP (-1)
#define FIELD_IS_BAD (-2)

/* Checks the fixed header and the total length, and walks the header
 * fields, recording where each interesting one starts; continues at
 * @walked with every field offset in M[] (ABSENT if not there), or goes
 * to @bad. */
static void
emit_header_walk (BusMcastBpf *bpf,
                  int          bad,
                  int          walked)
{
  /* UNIX_FDS: the kernel never lets fds through the group, so a message
   * that declares some came straight to the daemon with SCM_UNIX_DIRECT,
   * or is bogus: it goes where malformed packets go, to the daemon and
   * never to a member. */
  static const struct
  {
    dbus_uint32_t word;
    int slot;       /* scratch word to record the field in, FIELD_SKIP
                     * to skip it, FIELD_IS_BAD to go to @bad */
  } fields[] = {
    { FIELD_WORD (DBUS_HEADER_FIELD_PATH, 'o'), M_PATH },
    { FIELD_WORD (DBUS_HEADER_FIELD_INTERFACE, 's'), M_INTERFACE },
    { FIELD_WORD (DBUS_HEADER_FIELD_MEMBER, 's'), M_MEMBER },
    { FIELD_WORD (DBUS_HEADER_FIELD_DESTINATION, 's'), M_DESTINATION },
    { FIELD_WORD (DBUS_HEADER_FIELD_SENDER, 's'), M_SENDER },
    { FIELD_WORD (DBUS_HEADER_FIELD_SIGNATURE, 'g'), M_SIGNATURE },
    { FIELD_WORD (DBUS_HEADER_FIELD_ERROR_NAME, 's'), FIELD_SKIP },
    { FIELD_WORD (DBUS_HEADER_FIELD_REPLY_SERIAL, 'u'), FIELD_SKIP },
    { FIELD_WORD (DBUS_HEADER_FIELD_UNIX_FDS, 'u'), FIELD_IS_BAD }
  };
  static const int slots[] = { M_DESTINATION, M_SENDER, M_PATH, M_INTERFACE,
                               M_MEMBER, M_SIGNATURE };
  int i, j;

  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_IMM, ABSENT);
  for (i = 0; i < (int) _DBUS_N_ELEMENTS (slots); i++)
    bus_mcast_bpf_emit_stmt (bpf, BPF_ST, slots[i]);

  /* Fixed header: at least 16 bytes in a packet no reader truncates
   * (DBUS_SEQPACKET_FRAGMENT_SIZE), host byte order, version 1, a known
   * type, lengths below 64 KiB */
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_W | BPF_LEN, 0);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JGE | BPF_K, 16,
                           BUS_MCAST_BPF_NEXT, bad);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JGT | BPF_K,
                           DBUS_SEQPACKET_FRAGMENT_SIZE, bad,
                           BUS_MCAST_BPF_NEXT);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_B | BPF_ABS, 0);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, DBUS_LITTLE_ENDIAN,
                           BUS_MCAST_BPF_NEXT, bad);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_B | BPF_ABS, 3);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K,
                           DBUS_MAJOR_PROTOCOL_VERSION,
                           BUS_MCAST_BPF_NEXT, bad);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_B | BPF_ABS, 1);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K,
                           DBUS_MESSAGE_TYPE_INVALID, bad, BUS_MCAST_BPF_NEXT);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JGT | BPF_K,
                           DBUS_MESSAGE_TYPE_SIGNAL, bad, BUS_MCAST_BPF_NEXT);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_H | BPF_ABS, 6);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, 0,
                           BUS_MCAST_BPF_NEXT, bad);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_H | BPF_ABS, 14);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, 0,
                           BUS_MCAST_BPF_NEXT, bad);

  /* fields end = 16 + array length; body = 16 + align8 (array length);
   * the packet is exactly body + body length */
  bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_IMM, 0);
  emit_load_le16 (bpf, 12);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_ADD | BPF_K, 16);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ST, M_FIELDS_END);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_ADD | BPF_K, 7);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_AND | BPF_K, ~7u);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ST, M_BODY);
  emit_load_le16 (bpf, 4);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_MEM, M_BODY);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_ADD | BPF_X, 0);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_W | BPF_LEN, 0);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_X, 0,
                           BUS_MCAST_BPF_NEXT, bad);

  /* The walk: X = offset of the current field (8-aligned, before the end
   * of the array), unrolled MAX_FIELDS times. */
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_MEM, M_FIELDS_END);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, 16, walked,
                           BUS_MCAST_BPF_NEXT);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_IMM, 16);

  for (i = 0; i < MAX_FIELDS; i++)
    {
      int record[_DBUS_N_ELEMENTS (fields)];
      int skip_string = bus_mcast_bpf_label_new (bpf);
      int skip_signature = bus_mcast_bpf_label_new (bpf);
      int skip_u32 = bus_mcast_bpf_label_new (bpf);
      int end = bus_mcast_bpf_label_new (bpf);

      bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_W | BPF_IND, 0);
      for (j = 0; j < (int) _DBUS_N_ELEMENTS (fields); j++)
        {
          if (fields[j].slot >= 0)
            record[j] = bus_mcast_bpf_label_new (bpf);
          else if (fields[j].slot == FIELD_IS_BAD)
            record[j] = bad;
          else if ((fields[j].word & 0xff00) == ('s' << 8))
            record[j] = skip_string;
          else
            record[j] = skip_u32;
          bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K,
                                   fields[j].word, record[j],
                                   BUS_MCAST_BPF_NEXT);
        }

      /* Any other field, known code with another type or unknown code,
       * goes where malformed packets go: dbus-daemon strips unknown
       * fields before anyone sees them (HeaderFiltering), so such a
       * message reaches members only through the daemon. */
      bus_mcast_bpf_emit_ja (bpf, bad);

      for (j = 0; j < (int) _DBUS_N_ELEMENTS (fields); j++)
        {
          if (fields[j].slot < 0)
            continue;
          bus_mcast_bpf_label_place (bpf, record[j]);
          bus_mcast_bpf_emit_stmt (bpf, BPF_MISC | BPF_TXA, 0);
          bus_mcast_bpf_emit_stmt (bpf, BPF_ST, fields[j].slot);
          if (fields[j].slot == M_SIGNATURE)
            bus_mcast_bpf_emit_ja (bpf, skip_signature);
          else
            bus_mcast_bpf_emit_ja (bpf, skip_string);
        }

      /* string, object path: u32 length, bytes, nul */
      bus_mcast_bpf_label_place (bpf, skip_string);
      bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_H | BPF_IND, 6);
      bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, 0,
                               BUS_MCAST_BPF_NEXT, bad);
      emit_load_le16 (bpf, 4);
      bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_ADD | BPF_K, 8 + 1);
      bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_ADD | BPF_X, 0);
      bus_mcast_bpf_emit_ja (bpf, end);

      /* signature: u8 length, bytes, nul */
      bus_mcast_bpf_label_place (bpf, skip_signature);
      bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_B | BPF_IND, 4);
      bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_ADD | BPF_K, 4 + 1 + 1);
      bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_ADD | BPF_X, 0);
      bus_mcast_bpf_emit_ja (bpf, end);

      bus_mcast_bpf_label_place (bpf, skip_u32);
      bus_mcast_bpf_emit_stmt (bpf, BPF_MISC | BPF_TXA, 0);
      bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_ADD | BPF_K, 8);

      /* A = end of the field: the last one ends the array exactly, any
       * other is followed by another field inside it */
      bus_mcast_bpf_label_place (bpf, end);
      bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_MEM, M_FIELDS_END);
      bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_X, 0, walked,
                               BUS_MCAST_BPF_NEXT);
      bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_ADD | BPF_K, 7);
      bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_AND | BPF_K, ~7u);
      bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JGE | BPF_X, 0, bad,
                               BUS_MCAST_BPF_NEXT);
      bus_mcast_bpf_emit_stmt (bpf, BPF_MISC | BPF_TAX, 0);
    }

  /* more than MAX_FIELDS fields */
  bus_mcast_bpf_emit_ja (bpf, bad);
}

/* ---- Sets of strings: a decision tree over length, then chunks ---------- */

typedef struct
{
  const char *s;
  int len;
  int leaf;         /* label to go to when the string at X is s */
} BusMcastKey;

static int
key_compare (const void *a,
             const void *b)
{
  const BusMcastKey *ka = a;
  const BusMcastKey *kb = b;

  if (ka->len != kb->len)
    return ka->len < kb->len ? -1 : 1;
  return memcmp (ka->s, kb->s, ka->len);
}

/* Sorts @keys and drops repeated strings (keeping the first's leaf);
 * returns how many are left.  Strings too long for any packet go too. */
static int
keys_sort_unique (BusMcastKey *keys,
                  int          n)
{
  int i, kept = 0;

  qsort (keys, n, sizeof (BusMcastKey), key_compare);
  for (i = 0; i < n; i++)
    {
      if (keys[i].len > 0xffff)
        continue;
      if (kept > 0 && key_compare (&keys[kept - 1], &keys[i]) == 0)
        continue;
      keys[kept++] = keys[i];
    }
  return kept;
}

/* What one level of the tree compares: the length, or a chunk */
typedef dbus_uint32_t (* BusMcastKeyValue) (const BusMcastKey *key,
                                            int                offset);

static dbus_uint32_t
key_length_value (const BusMcastKey *key,
                  int                offset)
{
  return SWAP16 ((dbus_uint32_t) key->len);
}

static dbus_uint32_t
key_chunk_value (const BusMcastKey *key,
                 int                offset)
{
  return chunk_value (key->s, offset, chunk_size (key->len, offset));
}

static void emit_trie_chunks (BusMcastBpf       *bpf,
                              const BusMcastKey *keys,
                              int                n,
                              int                offset,
                              int                fail);

/* One level of the tree: @n sorted keys, grouped by value_of(); a group
 * whose string ends here (@child_offset is its length) goes to its key's
 * leaf, any other continues with its next chunk.  The last group's
 * subtree follows inline, the others come after it. */
static void
emit_trie_level (BusMcastBpf       *bpf,
                 const BusMcastKey *keys,
                 int                n,
                 BusMcastKeyValue   value_of,
                 int                offset,
                 int                child_offset,
                 int                fail)
{
  int *labels;
  int i, j;

  labels = dbus_new (int, n);
  if (labels == NULL)
    {
      bus_mcast_bpf_set_oom (bpf);
      return;
    }

  for (i = 0; i < n; i = j)
    {
      dbus_uint32_t v = value_of (&keys[i], offset);
      dbus_bool_t last;

      for (j = i + 1; j < n && value_of (&keys[j], offset) == v; j++)
        ;
      last = j == n;
      if (keys[i].len == child_offset)
        labels[i] = keys[i].leaf;          /* the string ends here */
      else
        labels[i] = last ? BUS_MCAST_BPF_NEXT
                         : bus_mcast_bpf_label_new (bpf);
      bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, v, labels[i],
                               last ? fail : BUS_MCAST_BPF_NEXT);
    }

  for (i = n - 1; i >= 0; i--)
    if (i == 0 || value_of (&keys[i - 1], offset) != value_of (&keys[i], offset))
      break;
  /* i: first key of the last group */
  if (labels[i] == BUS_MCAST_BPF_NEXT)
    emit_trie_chunks (bpf, keys + i, n - i, child_offset, fail);

  for (i = 0; i < n; i = j)
    {
      dbus_uint32_t v = value_of (&keys[i], offset);

      for (j = i + 1; j < n && value_of (&keys[j], offset) == v; j++)
        ;
      if (j == n || labels[i] == keys[i].leaf)
        continue;
      bus_mcast_bpf_label_place (bpf, labels[i]);
      emit_trie_chunks (bpf, keys + i, j - i, child_offset, fail);
    }

  dbus_free (labels);
}

/* @keys all have the same length and the same first @offset bytes */
static void
emit_trie_chunks (BusMcastBpf       *bpf,
                  const BusMcastKey *keys,
                  int                n,
                  int                offset,
                  int                fail)
{
  int size = chunk_size (keys[0].len, offset);

  bus_mcast_bpf_emit_stmt (bpf, chunk_load (size), 8 + offset);
  emit_trie_level (bpf, keys, n, key_chunk_value, offset, offset + size, fail);
}

/* Goes to the leaf of the key equal to the string whose field starts at X,
 * or to @fail.  @keys come from keys_sort_unique(). */
static void
emit_trie (BusMcastBpf       *bpf,
           const BusMcastKey *keys,
           int                n,
           int                fail)
{
  if (n == 0)
    {
      bus_mcast_bpf_emit_ja (bpf, fail);
      return;
    }
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_H | BPF_IND, 4);
  emit_trie_level (bpf, keys, n, key_length_value, 0, 0, fail);
}

/* ---- Rules ----------------------------------------------------------------- */

typedef enum
{
  SECTION_BROADCAST,    /* signals without DESTINATION */
  SECTION_EAVESDROP     /* messages addressed to someone else */
} BusMcastSection;

typedef struct
{
  BusMcastBpf *bpf;
  BusMcastFilter *filter;
  BusMcastRule **rules;     /* sorted by rule_compare(), without repeats */
  int n_rules;
  BusMcastPrecision level;
  /* At BUS_MCAST_PRECISION_SENDERS: how many senders, those with the most
   * rules first, have all their rules matched on the sender alone; the
   * others keep their rules as at NO_ARGS */
  int loose_senders;
  dbus_bool_t args_loosened;
  /* DAEMON, when even its loosest program does not fit: every message
   * with a destination passes, eavesdropped or not */
  dbus_bool_t every_unicast;
} BusMcastCompiler;

static int
string_compare (const char *a,
                const char *b)
{
  if (a == NULL || b == NULL)
    return a == b ? 0 : a == NULL ? -1 : 1;
  return strcmp (a, b);
}

/* Orders rules by sender first (rules without one first), so the rules of
 * one sender are adjacent; 0 means the rules match the same messages. */
static int
rule_compare (const void *a,
              const void *b)
{
  const BusMcastRule *ra = *(BusMcastRule * const *) a;
  const BusMcastRule *rb = *(BusMcastRule * const *) b;
  const DBusMatchRule *ma = ra->rule;
  const DBusMatchRule *mb = rb->rule;
  int c, i;

  if ((c = string_compare (ra->sender, rb->sender)) != 0)
    return c;
  if (ma->flags != mb->flags)
    return ma->flags < mb->flags ? -1 : 1;
  if ((ma->flags & DBUS_MATCH_MESSAGE_TYPE)
      && ma->message_type != mb->message_type)
    return ma->message_type < mb->message_type ? -1 : 1;
  if ((c = string_compare (ma->interface, mb->interface)) != 0
      || (c = string_compare (ma->member, mb->member)) != 0
      || (c = string_compare (ma->path, mb->path)) != 0
      || (c = string_compare (ma->destination, mb->destination)) != 0)
    return c;
  if (!(ma->flags & DBUS_MATCH_ARGS))
    return 0;
  if (ma->args_len != mb->args_len)
    return ma->args_len < mb->args_len ? -1 : 1;
  for (i = 0; i < ma->args_len; i++)
    {
      if ((c = string_compare (ma->args[i], mb->args[i])) != 0)
        return c;
      if (ma->args[i] != NULL && ma->arg_lens[i] != mb->arg_lens[i])
        return ma->arg_lens[i] < mb->arg_lens[i] ? -1 : 1;
    }
  return 0;
}

static dbus_bool_t
rule_applies (const BusMcastRule *r,
              BusMcastSection     section)
{
  const DBusMatchRule *rule = r->rule;

  if (section == SECTION_EAVESDROP)
    return (rule->flags & DBUS_MATCH_CLIENT_IS_EAVESDROPPING) != 0;

  /* A rule with a destination never matches a broadcast (bus/signals.c) */
  if (rule->flags & DBUS_MATCH_DESTINATION)
    return FALSE;
  return !(rule->flags & DBUS_MATCH_MESSAGE_TYPE)
    || rule->message_type == DBUS_MESSAGE_TYPE_SIGNAL;
}

static dbus_bool_t
rule_tests_arg0 (const BusMcastRule *r)
{
  const DBusMatchRule *rule = r->rule;

  return (rule->flags & DBUS_MATCH_ARGS) && rule->args_len > 0
    && rule->args[0] != NULL;
}

/* M[M_ARG0_STRING], M[M_ARG0_PATH] = a field-like base of the first
 * argument (its length at +4, its bytes at +8) if the body starts with a
 * string (or object path), lies within the packet and is shorter than
 * 64 KiB; ABSENT otherwise. */
static void
emit_arg0_prepare (BusMcastBpf *bpf)
{
  int string = bus_mcast_bpf_label_new (bpf);
  int done = bus_mcast_bpf_label_new (bpf);

  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_IMM, ABSENT);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ST, M_ARG0_STRING);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ST, M_ARG0_PATH);

  /* room for the length, the bytes and the nul */
  bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_MEM, M_BODY);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_W | BPF_LEN, 0);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_SUB | BPF_X, 0);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JGE | BPF_K, 4 + 1,
                           BUS_MCAST_BPF_NEXT, done);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ST, M_TEMP);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_H | BPF_IND, 2);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, 0,
                           BUS_MCAST_BPF_NEXT, done);
  emit_load_le16 (bpf, 0);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_ADD | BPF_K, 4 + 1);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_MEM, M_TEMP);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JGT | BPF_X, 0, done,
                           BUS_MCAST_BPF_NEXT);

  /* the type: first character of the signature */
  bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_MEM, M_SIGNATURE);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_B | BPF_IND, 4);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, 0, done,
                           BUS_MCAST_BPF_NEXT);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_B | BPF_IND, 5);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, DBUS_TYPE_STRING,
                           string, BUS_MCAST_BPF_NEXT);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K,
                           DBUS_TYPE_OBJECT_PATH, BUS_MCAST_BPF_NEXT, done);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_MEM, M_BODY);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_SUB | BPF_K, 4);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ST, M_ARG0_PATH);
  bus_mcast_bpf_emit_ja (bpf, done);

  bus_mcast_bpf_label_place (bpf, string);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_MEM, M_BODY);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ALU | BPF_SUB | BPF_K, 4);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ST, M_ARG0_STRING);
  bus_mcast_bpf_emit_stmt (bpf, BPF_ST, M_ARG0_PATH);
  bus_mcast_bpf_label_place (bpf, done);
}

/* argN= (strings only), argNpath= (strings and object paths) and
 * arg0namespace= on the first argument (bus/signals.c) */
static void
emit_arg0_test (BusMcastBpf         *bpf,
                const DBusMatchRule *rule,
                int                  fail)
{
  unsigned int how = rule->arg_lens[0] & DBUS_MATCH_ARG_FLAGS;

  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_MEM,
                           (how & DBUS_MATCH_ARG_IS_PATH)
                           ? M_ARG0_PATH : M_ARG0_STRING);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, ABSENT, fail,
                           BUS_MCAST_BPF_NEXT);
  bus_mcast_bpf_emit_stmt (bpf, BPF_MISC | BPF_TAX, 0);
  if (how & DBUS_MATCH_ARG_IS_PATH)
    emit_arg_path_test (bpf, rule->args[0], fail);
  else if (how & DBUS_MATCH_ARG_NAMESPACE)
    emit_namespace_test (bpf, rule->args[0], '.', fail);
  else
    emit_string_test (bpf, rule->args[0], fail);
}

static void
emit_field_string_test (BusMcastBpf *bpf,
                        int          slot,
                        const char  *s,
                        int          fail)
{
  bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_MEM, slot);
  emit_string_test (bpf, s, fail);
}

/* Every key of @r but its sender and the @dispatched ones (a tree
 * compared them already), as far as the level allows; goes to @fail if
 * one does not match, falls through if all do. */
static void
emit_rule_keys (BusMcastCompiler   *c,
                const BusMcastRule *r,
                dbus_uint32_t       dispatched,
                BusMcastSection     section,
                int                 fail)
{
  BusMcastBpf *bpf = c->bpf;
  const DBusMatchRule *rule = r->rule;
  int i;

  /* a broadcast is a signal: rule_applies() checked the type */
  if (section == SECTION_EAVESDROP && (rule->flags & DBUS_MATCH_MESSAGE_TYPE))
    {
      bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_B | BPF_ABS, 1);
      bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K,
                               rule->message_type, BUS_MCAST_BPF_NEXT, fail);
    }
  if (rule->flags & DBUS_MATCH_MEMBER & ~dispatched)
    emit_field_string_test (bpf, M_MEMBER, rule->member, fail);
  if (rule->flags & DBUS_MATCH_INTERFACE & ~dispatched)
    emit_field_string_test (bpf, M_INTERFACE, rule->interface, fail);
  if (rule->flags & DBUS_MATCH_PATH)
    emit_field_string_test (bpf, M_PATH, rule->path, fail);
  if (rule->flags & DBUS_MATCH_PATH_NAMESPACE)
    {
      if (strcmp (rule->path, "/") == 0)
        {
          bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_MEM, M_PATH);
          bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, ABSENT,
                                   fail, BUS_MCAST_BPF_NEXT);
        }
      else
        {
          bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_MEM, M_PATH);
          emit_namespace_test (bpf, rule->path, '/', fail);
        }
    }
  if (rule->flags & DBUS_MATCH_DESTINATION)
    emit_field_string_test (bpf, M_DESTINATION, rule->destination, fail);

  if (!(rule->flags & DBUS_MATCH_ARGS) || c->level != BUS_MCAST_PRECISION_EXACT)
    return;
  for (i = 0; i < rule->args_len; i++)
    {
      if (rule->args[i] == NULL)
        continue;
      if (i == 0)
        emit_arg0_test (bpf, rule, fail);
      else
        c->args_loosened = TRUE;    /* no fixed offset: taken as matching */
    }
}

/* Rules one after another: goes to @pass at the first that matches, to
 * @fail if none does */
static void
emit_rule_list (BusMcastCompiler *c,
                BusMcastRule    **rules,
                int               n,
                dbus_uint32_t     dispatched,
                BusMcastSection   section,
                int               pass,
                int               fail)
{
  BusMcastBpf *bpf = c->bpf;
  int i;

  for (i = 0; i < n; i++)
    {
      int next = bus_mcast_bpf_label_new (bpf);
      int before = bus_mcast_bpf_get_length (bpf);

      emit_rule_keys (c, rules[i], dispatched, section, next);
      bus_mcast_bpf_emit_ja (bpf, pass);
      bus_mcast_bpf_label_place (bpf, next);
      if (bus_mcast_bpf_get_length (bpf) == before + 1)
        return;     /* matches every message: the rest can't add anything */
    }
  bus_mcast_bpf_emit_ja (bpf, fail);
}

/* The header fields that tell rules apart after their sender, in this
 * order: a tree of the distinct values the rules ask for in one field
 * leads to the rules with that value, and the rules without that key
 * come after.  A message then runs the keys of the few rules that can
 * match it, not of all: hundreds of rules that differ in their member
 * stay exact (doc/mcast-filter.md). */
typedef struct
{
  dbus_uint32_t key;          /* DBUS_MATCH_INTERFACE, ... */
  int slot;                   /* its scratch word */
} BusMcastDispatch;

static const BusMcastDispatch dispatches[] = {
  { DBUS_MATCH_INTERFACE, M_INTERFACE },
  { DBUS_MATCH_MEMBER, M_MEMBER },
};

static const char *
rule_value (const BusMcastRule *r,
            dbus_uint32_t       key)
{
  return key == DBUS_MATCH_INTERFACE ? r->rule->interface : r->rule->member;
}

static int
interface_compare (const void *a,
                   const void *b)
{
  return strcmp ((*(BusMcastRule * const *) a)->rule->interface,
                 (*(BusMcastRule * const *) b)->rule->interface);
}

static int
member_compare (const void *a,
                const void *b)
{
  return strcmp ((*(BusMcastRule * const *) a)->rule->member,
                 (*(BusMcastRule * const *) b)->rule->member);
}

/* @rules as a tree over dispatches[@depth] and the fields after it, then
 * one after another (emit_rule_list()): goes to @pass if one matches, to
 * @fail if none does.  @dispatched: the keys compared on the way here. */
static void
emit_rule_tree (BusMcastCompiler *c,
                BusMcastRule    **rules,
                int               n,
                int               depth,
                dbus_uint32_t     dispatched,
                BusMcastSection   section,
                int               pass,
                int               fail)
{
  BusMcastBpf *bpf = c->bpf;
  BusMcastRule **keyed = NULL, **unkeyed = NULL;
  BusMcastKey *keys = NULL, *sorted = NULL;
  int *first = NULL;
  dbus_uint32_t key;
  int n_keyed = 0, n_unkeyed = 0, n_keys = 0, i, k, others;

  if (depth == _DBUS_N_ELEMENTS (dispatches))
    {
      emit_rule_list (c, rules, n, dispatched, section, pass, fail);
      return;
    }

  key = dispatches[depth].key;
  keyed = dbus_new (BusMcastRule *, n + 1);
  unkeyed = dbus_new (BusMcastRule *, n + 1);
  keys = dbus_new (BusMcastKey, n + 1);
  sorted = dbus_new (BusMcastKey, n + 1);
  first = dbus_new (int, n + 2);
  if (keyed == NULL || unkeyed == NULL || keys == NULL || sorted == NULL ||
      first == NULL)
    {
      bus_mcast_bpf_set_oom (bpf);
      goto out;
    }

  for (i = 0; i < n; i++)
    {
      if (rules[i]->rule->flags & key)
        keyed[n_keyed++] = rules[i];
      else
        unkeyed[n_unkeyed++] = rules[i];
    }
  /* A tree of one value costs more than the rule's own test of it */
  if (n_keyed <= 1)
    {
      emit_rule_tree (c, rules, n, depth + 1, dispatched, section, pass, fail);
      goto out;
    }

  qsort (keyed, n_keyed, sizeof (BusMcastRule *),
         key == DBUS_MATCH_INTERFACE ? interface_compare : member_compare);
  for (i = 0; i < n_keyed; i++)
    if (i == 0 || strcmp (rule_value (keyed[i - 1], key),
                          rule_value (keyed[i], key)) != 0)
      {
        keys[n_keys].s = rule_value (keyed[i], key);
        keys[n_keys].len = strlen (keys[n_keys].s);
        keys[n_keys].leaf = bus_mcast_bpf_label_new (bpf);
        first[n_keys++] = i;
      }
  first[n_keys] = n_keyed;

  others = n_unkeyed > 0 ? bus_mcast_bpf_label_new (bpf) : fail;
  memcpy (sorted, keys, sizeof (BusMcastKey) * n_keys);
  /* the values are already distinct: this only orders them */
  bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_MEM, dispatches[depth].slot);
  emit_trie (bpf, sorted, keys_sort_unique (sorted, n_keys), others);
  for (k = 0; k < n_keys; k++)
    {
      bus_mcast_bpf_label_place (bpf, keys[k].leaf);
      emit_rule_tree (c, keyed + first[k], first[k + 1] - first[k],
                      depth + 1, dispatched | key, section, pass, others);
    }
  if (n_unkeyed > 0)
    {
      bus_mcast_bpf_label_place (bpf, others);
      emit_rule_tree (c, unkeyed, n_unkeyed, depth + 1, dispatched, section,
                      pass, fail);
    }

out:
  dbus_free (keyed);
  dbus_free (unkeyed);
  dbus_free (keys);
  dbus_free (sorted);
  dbus_free (first);
}

/* A sender of a section: how many rules it has, and its place */
typedef struct
{
  int n_rules;
  int index;
} BusMcastSenderSize;

/* Most rules first, the first of equals first */
static int
sender_size_compare (const void *a,
                     const void *b)
{
  const BusMcastSenderSize *x = a;
  const BusMcastSenderSize *y = b;

  if (x->n_rules != y->n_rules)
    return x->n_rules > y->n_rules ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* loose[k]: whether sender @k, whose rules are @first[k] up to
 * @first[k + 1], is among the c->loose_senders with the most rules, whose
 * rules are matched on the sender alone.  FALSE if no memory. */
static dbus_bool_t
mark_loose_senders (const BusMcastCompiler *c,
                    const int              *first,
                    int                     n_keys,
                    dbus_bool_t            *loose)
{
  BusMcastSenderSize *sizes;
  int k;

  for (k = 0; k < n_keys; k++)
    loose[k] = FALSE;
  if (c->level != BUS_MCAST_PRECISION_SENDERS || n_keys == 0)
    return TRUE;

  sizes = dbus_new (BusMcastSenderSize, n_keys);
  if (sizes == NULL)
    return FALSE;
  for (k = 0; k < n_keys; k++)
    {
      sizes[k].n_rules = first[k + 1] - first[k];
      sizes[k].index = k;
    }
  qsort (sizes, n_keys, sizeof (BusMcastSenderSize), sender_size_compare);
  for (k = 0; k < n_keys && k < c->loose_senders; k++)
    loose[sizes[k].index] = TRUE;
  dbus_free (sizes);
  return TRUE;
}

/* The rules that apply to @section: the senders they ask for in one tree,
 * then each sender's rules, then the rules without a sender */
static void
emit_rule_section (BusMcastCompiler *c,
                   BusMcastSection   section,
                   int               pass,
                   int               fail)
{
  BusMcastBpf *bpf = c->bpf;
  BusMcastRule **set;
  BusMcastKey *keys;
  int *first;       /* per key: index in set of its first rule */
  dbus_bool_t *loose; /* per key: matched on the sender alone */
  int n = 0, n_unsent = 0, n_keys = 0;
  dbus_bool_t arg0 = FALSE;
  int i, k, others;

  set = dbus_new (BusMcastRule *, c->n_rules + 1);
  keys = dbus_new (BusMcastKey, c->n_rules + 1);
  first = dbus_new (int, c->n_rules + 2);
  loose = dbus_new (dbus_bool_t, c->n_rules + 1);
  if (set == NULL || keys == NULL || first == NULL || loose == NULL)
    {
      bus_mcast_bpf_set_oom (bpf);
      goto out;
    }

  /* c->rules is sorted: rules without sender, then by sender */
  for (i = 0; i < c->n_rules; i++)
    {
      BusMcastRule *r = c->rules[i];

      if (!rule_applies (r, section))
        continue;
      if (r->sender == NULL)
        n_unsent++;
      else if (n == n_unsent || strcmp (set[n - 1]->sender, r->sender) != 0)
        {
          keys[n_keys].s = r->sender;
          keys[n_keys].len = strlen (r->sender);
          keys[n_keys].leaf = bus_mcast_bpf_label_new (bpf);
          first[n_keys++] = n;
        }
      arg0 = arg0 || rule_tests_arg0 (r);
      set[n++] = r;
    }
  first[n_keys] = n;
  if (!mark_loose_senders (c, first, n_keys, loose))
    {
      bus_mcast_bpf_set_oom (bpf);
      goto out;
    }

  if (n == 0)
    {
      bus_mcast_bpf_emit_ja (bpf, fail);
      goto out;
    }
  if (c->level == BUS_MCAST_PRECISION_SIGNALS)
    {
      bus_mcast_bpf_emit_ja (bpf, pass);
      goto out;
    }

  if (arg0 && c->level == BUS_MCAST_PRECISION_EXACT)
    emit_arg0_prepare (bpf);

  others = n_unsent > 0 ? bus_mcast_bpf_label_new (bpf) : fail;
  if (n_keys > 0)
    {
      BusMcastKey *sorted = dbus_new (BusMcastKey, n_keys);

      if (sorted == NULL)
        {
          bus_mcast_bpf_set_oom (bpf);
          goto out;
        }
      memcpy (sorted, keys, sizeof (BusMcastKey) * n_keys);
      /* senders are already distinct: this only orders them */
      bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_MEM, M_SENDER);
      emit_trie (bpf, sorted, keys_sort_unique (sorted, n_keys), others);
      dbus_free (sorted);
    }
  for (k = 0; k < n_keys; k++)
    {
      bus_mcast_bpf_label_place (bpf, keys[k].leaf);
      if (loose[k])
        bus_mcast_bpf_emit_ja (bpf, pass);
      else
        emit_rule_tree (c, set + first[k], first[k + 1] - first[k], 0, 0,
                        section, pass, others);
    }
  if (n_unsent > 0)
    {
      bus_mcast_bpf_label_place (bpf, others);
      emit_rule_tree (c, set, n_unsent, 0, 0, section, pass, fail);
    }

out:
  dbus_free (set);
  dbus_free (keys);
  dbus_free (first);
  dbus_free (loose);
}

/* ---- Programs ---------------------------------------------------------------- */

/* The names as a tree leading to @leaf */
static void
emit_names (BusMcastCompiler *c,
            int               leaf,
            int               fail)
{
  BusMcastBpf *bpf = c->bpf;
  BusMcastKey *keys;
  int i;

  keys = dbus_new (BusMcastKey, c->filter->n_names + 1);
  if (keys == NULL)
    {
      bus_mcast_bpf_set_oom (bpf);
      return;
    }
  for (i = 0; i < c->filter->n_names; i++)
    {
      keys[i].s = c->filter->names[i];
      keys[i].len = strlen (keys[i].s);
      keys[i].leaf = leaf;
    }
  bus_mcast_bpf_emit_stmt (bpf, BPF_LDX | BPF_MEM, M_DESTINATION);
  emit_trie (bpf, keys, keys_sort_unique (keys, c->filter->n_names), fail);
  dbus_free (keys);
}

/* The whole program at c->level */
static void
emit_program (BusMcastCompiler *c)
{
  BusMcastBpf *bpf = c->bpf;
  dbus_bool_t member = c->filter->kind == BUS_MCAST_FILTER_MEMBER;
  int pass, addressee, unclaimed, drop, walked, no_destination, eavesdrop;

  pass = bus_mcast_bpf_label_new (bpf);
  addressee = bus_mcast_bpf_label_new (bpf);
  unclaimed = bus_mcast_bpf_label_new (bpf);
  drop = bus_mcast_bpf_label_new (bpf);
  walked = bus_mcast_bpf_label_new (bpf);
  no_destination = bus_mcast_bpf_label_new (bpf);
  eavesdrop = bus_mcast_bpf_label_new (bpf);

  emit_header_walk (bpf, member ? drop : pass, walked);
  bus_mcast_bpf_label_place (bpf, walked);

  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_MEM, M_DESTINATION);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K, ABSENT,
                           no_destination, BUS_MCAST_BPF_NEXT);
  if (member)
    {
      /* ours, or eavesdropped */
      emit_names (c, addressee, eavesdrop);
      bus_mcast_bpf_label_place (bpf, eavesdrop);
      emit_rule_section (c, SECTION_EAVESDROP, pass, drop);
    }
  else if (c->every_unicast)
    {
      bus_mcast_bpf_emit_ja (bpf, pass);
    }
  else
    {
      /* eavesdropped, else unless a member's filter claimed it (it is
       * addressed to the member's name, and the member got it) */
      emit_rule_section (c, SECTION_EAVESDROP, pass, unclaimed);
    }

  /* no destination: a member gets only signals, the daemon everything
   * else (method calls to the bus driver) */
  bus_mcast_bpf_label_place (bpf, no_destination);
  bus_mcast_bpf_emit_stmt (bpf, BPF_LD | BPF_B | BPF_ABS, 1);
  bus_mcast_bpf_emit_jump (bpf, BPF_JMP | BPF_JEQ | BPF_K,
                           DBUS_MESSAGE_TYPE_SIGNAL, BUS_MCAST_BPF_NEXT,
                           member ? drop : pass);
  emit_rule_section (c, SECTION_BROADCAST, pass, drop);

  bus_mcast_bpf_label_place (bpf, pass);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, PASS_VALUE);
  bus_mcast_bpf_label_place (bpf, addressee);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, ADDRESSEE_VALUE);
  bus_mcast_bpf_label_place (bpf, unclaimed);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, UNCLAIMED_VALUE);
  bus_mcast_bpf_label_place (bpf, drop);
  bus_mcast_bpf_emit_stmt (bpf, BPF_RET | BPF_K, DROP_VALUE);
}

/* FALSE with *oom set, or if it does not fit */
static dbus_bool_t
compile_at (BusMcastCompiler  *c,
            BusMcastPrecision  level,
            BusMcastProgram   *program,
            dbus_bool_t       *oom)
{
  struct sock_fprog laid_out;
  dbus_bool_t ok;

  c->bpf = bus_mcast_bpf_new ();
  if (c->bpf == NULL)
    {
      *oom = TRUE;
      return FALSE;
    }
  c->level = level;
  c->args_loosened = FALSE;
  emit_program (c);
  ok = bus_mcast_bpf_finish (c->bpf, &laid_out, oom);
  bus_mcast_bpf_free (c->bpf);
  c->bpf = NULL;
  if (ok)
    {
      program->insns = laid_out.filter;
      program->len = laid_out.len;
      program->precision =
        level == BUS_MCAST_PRECISION_EXACT && c->args_loosened
        ? BUS_MCAST_PRECISION_NO_ARGS : level;
    }
  return ok;
}

/* At BUS_MCAST_PRECISION_SENDERS, with few senders loosened: a binary
 * search (fewer loosened, more instructions) that stops within a 32nd of
 * the senders of the fewest that fit, so that it compiles at most six
 * programs whatever the number of senders (a member's AddMatch costs the
 * daemon that much).  FALSE with *oom set, or if even all of them
 * loosened do not fit. */
static dbus_bool_t
compile_loose_senders (BusMcastCompiler *c,
                       BusMcastProgram  *program,
                       dbus_bool_t      *oom)
{
  int low = 1, high = 0, slack, i;

  for (i = 0; i < c->n_rules; i++)
    if (c->rules[i]->sender != NULL &&
        (i == 0 || c->rules[i - 1]->sender == NULL ||
         strcmp (c->rules[i - 1]->sender, c->rules[i]->sender) != 0))
      high++;

  c->loose_senders = high;
  if (!compile_at (c, BUS_MCAST_PRECISION_SENDERS, program, oom))
    return FALSE;

  /* high fits; look for fewer */
  slack = high / 32;
  while (high - low > slack && !*oom)
    {
      BusMcastProgram tighter = { NULL, 0, BUS_MCAST_PRECISION_SENDERS };

      c->loose_senders = low + (high - low) / 2;
      if (compile_at (c, BUS_MCAST_PRECISION_SENDERS, &tighter, oom))
        {
          bus_mcast_program_clear (program);
          *program = tighter;
          high = c->loose_senders;
        }
      else
        {
          low = c->loose_senders + 1;
        }
    }
  if (*oom)
    bus_mcast_program_clear (program);
  return !*oom;
}

dbus_bool_t
bus_mcast_filter_compile (BusMcastFilter  *filter,
                          BusMcastProgram *program,
                          DBusError       *error)
{
  BusMcastCompiler c;
  BusMcastPrecision level;
  dbus_bool_t oom = FALSE;
  int i, n;

  _DBUS_ASSERT_ERROR_IS_CLEAR (error);

  program->insns = NULL;
  program->len = 0;
  program->precision = BUS_MCAST_PRECISION_EXACT;

  if (filter->accept_all)
    {
      program->insns = dbus_new (struct sock_filter, 1);
      if (program->insns == NULL)
        {
          BUS_SET_OOM (error);
          return FALSE;
        }
      program->insns[0] =
        (struct sock_filter) BPF_STMT (BPF_RET | BPF_K, PASS_VALUE);
      program->len = 1;
      return TRUE;
    }

  memset (&c, 0, sizeof (c));
  c.filter = filter;
  c.rules = dbus_new (BusMcastRule *, filter->n_rules + 1);
  if (c.rules == NULL)
    {
      BUS_SET_OOM (error);
      return FALSE;
    }
  for (i = 0; i < filter->n_rules; i++)
    c.rules[i] = &filter->rules[i];
  qsort (c.rules, filter->n_rules, sizeof (BusMcastRule *), rule_compare);
  for (i = 0, n = 0; i < filter->n_rules; i++)
    if (n == 0 || rule_compare (&c.rules[n - 1], &c.rules[i]) != 0)
      c.rules[n++] = c.rules[i];
  c.n_rules = n;

  for (level = BUS_MCAST_PRECISION_EXACT;
       level <= BUS_MCAST_PRECISION_SIGNALS && !oom;
       level++)
    {
      if (level == BUS_MCAST_PRECISION_SENDERS)
        {
          if (compile_loose_senders (&c, program, &oom))
            goto out;
          continue;
        }
      if (compile_at (&c, level, program, &oom))
        goto out;
    }

  /* Too many eavesdropping rules: the daemon may get more than it needs,
   * never a member */
  c.every_unicast = filter->kind == BUS_MCAST_FILTER_DAEMON;
  if (!oom && c.every_unicast &&
      compile_at (&c, BUS_MCAST_PRECISION_SIGNALS, program, &oom))
    goto out;

  if (oom)
    BUS_SET_OOM (error);
  else
    dbus_set_error (error, DBUS_ERROR_LIMITS_EXCEEDED,
                    "The %d names of this connection do not fit in a "
                    "socket filter", filter->n_names);
  dbus_free (c.rules);
  return FALSE;

out:
  dbus_free (c.rules);
  return TRUE;
}
