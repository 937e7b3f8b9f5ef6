/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-bpf.h  A classic BPF assembler: instructions with symbolic forward
 *              jumps, laid out into a socket filter program
 *
 * What this module is for: the match-to-BPF compiler (mcast-filter.h)
 * writes programs of thousands of instructions, and when it writes a jump
 * it does not know yet how far the target is.  It hands the instructions
 * to this module one by one, with labels as jump targets, and gets back
 * the program laid out:
 *
 *  - a label stands for the instruction emitted right after the label is
 *    placed, BUS_MCAST_BPF_NEXT for the one right after the jump.
 *    Classic BPF only jumps forward: a label is placed once, after every
 *    jump to it and before some instruction (assertions check that);
 *  - a conditional jump whose target ends up more than 255 instructions
 *    away (jt and jf are 8-bit offsets) goes through one or two BPF_JA
 *    (32-bit offset) placed right after it; bus_mcast_bpf_finish() works
 *    out which jumps need that;
 *  - a BPF_JA, written or added that way, to a label placed before a
 *    BPF_RET is written as that BPF_RET;
 *  - a program never has more than BPF_MAXINSNS instructions.
 *
 * Errors are sticky: once an allocation failed (the assembler's own, or
 * the caller's, bus_mcast_bpf_set_oom()) or the program grew too big,
 * emitting does nothing and bus_mcast_bpf_finish() fails and says which.
 * What the instructions do is the caller's business; the kernel's checker
 * judges them when the program is attached.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#ifndef BUS_MCAST_BPF_H
#define BUS_MCAST_BPF_H

#include <dbus/dbus.h>
#include <linux/filter.h>

/* The label of the instruction right after a jump */
#define BUS_MCAST_BPF_NEXT (-1)

typedef struct BusMcastBpf BusMcastBpf;

BusMcastBpf *bus_mcast_bpf_new         (void);
void         bus_mcast_bpf_free        (BusMcastBpf       *bpf);

/* A new label, not placed yet; BUS_MCAST_BPF_NEXT if out of memory (the
 * error is recorded: such a program is never finished) */
int          bus_mcast_bpf_label_new   (BusMcastBpf       *bpf);
void         bus_mcast_bpf_label_place (BusMcastBpf       *bpf,
                                        int                label);

/* Any instruction but a jump (BPF_LD, BPF_ALU, BPF_RET, ...) */
void         bus_mcast_bpf_emit_stmt   (BusMcastBpf       *bpf,
                                        unsigned short     code,
                                        dbus_uint32_t      k);
/* A conditional jump (BPF_JMP | BPF_JEQ, BPF_JGT, BPF_JGE or BPF_JSET,
 * with BPF_K or BPF_X) to @jt if true, @jf if false */
void         bus_mcast_bpf_emit_jump   (BusMcastBpf       *bpf,
                                        unsigned short     code,
                                        dbus_uint32_t      k,
                                        int                jt,
                                        int                jf);
/* BPF_JMP | BPF_JA to @label */
void         bus_mcast_bpf_emit_ja     (BusMcastBpf       *bpf,
                                        int                label);

/* How many instructions were emitted so far (laying them out may add
 * some) */
int          bus_mcast_bpf_get_length  (BusMcastBpf       *bpf);
/* For the caller's own failed allocations: the program is never finished */
void         bus_mcast_bpf_set_oom     (BusMcastBpf       *bpf);

/* Lays the program out: program->filter (dbus_free() it) and
 * program->len.  FALSE if that is impossible, with *oom TRUE if memory
 * ran out and FALSE if the program does not fit in BPF_MAXINSNS. */
dbus_bool_t  bus_mcast_bpf_finish      (BusMcastBpf       *bpf,
                                        struct sock_fprog *program,
                                        dbus_bool_t       *oom);

#endif /* BUS_MCAST_BPF_H */
