/* bench-pingpong: a plain Unix round trip, for sockets that never use a
 * multicast group (make bench-pingpong, doc/performance.md).
 *
 * The kernel series must cost such sockets nothing measurable.  Two
 * processes bounce one message over a socketpair, SOCK_DGRAM and
 * SOCK_SEQPACKET, for a number of rounds; the same binary runs on a kernel
 * built without CONFIG_UNIX_MCAST, on one with it whose hooks are still
 * patched out (no group exists), and, with --group, after creating a
 * group so that every hook is live.
 *
 * Output, one tab-separated line per run (after a "#" header line):
 *   type size rep rounds wall_ns round_trips_per_s cpu_ns
 * where cpu_ns is the CPU time of both processes per round trip.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <linux/un.h>

static const char bench_name[] = "bench-pingpong";
#include "common.h"

#define MAX_SIZE 65536

/* Bounce @rounds messages of @size bytes from @fd back to it. */
static void
echo (int fd, int size, long rounds)
{
  char buf[MAX_SIZE];
  long i;

  for (i = 0; i < rounds; i++)
    if (recv (fd, buf, size, 0) != size || send (fd, buf, size, 0) != size)
      die ("echo");
}

static void
run (int type, const char *name, int size, int rep, long rounds)
{
  char buf[MAX_SIZE] = { 0 };
  struct rusage child;
  int64_t wall, cpu;
  int sv[2], status;
  pid_t pid;
  long i;

  if (socketpair (AF_UNIX, type, 0, sv) < 0)
    die ("socketpair");
  pid = fork ();
  if (pid < 0)
    die ("fork");
  if (pid == 0)
    {
      close (sv[0]);
      echo (sv[1], size, rounds);
      _exit (0);
    }
  close (sv[1]);

  wall = clock_ns (CLOCK_MONOTONIC);
  cpu = clock_ns (CLOCK_PROCESS_CPUTIME_ID);
  for (i = 0; i < rounds; i++)
    if (send (sv[0], buf, size, 0) != size || recv (sv[0], buf, size, 0) != size)
      die ("ping");
  wall = clock_ns (CLOCK_MONOTONIC) - wall;
  cpu = clock_ns (CLOCK_PROCESS_CPUTIME_ID) - cpu;

  if (wait4 (pid, &status, 0, &child) != pid || !WIFEXITED (status) ||
      WEXITSTATUS (status) != 0)
    die ("echo process");
  cpu += child.ru_utime.tv_sec * 1000000000LL + child.ru_utime.tv_usec * 1000LL +
         child.ru_stime.tv_sec * 1000000000LL + child.ru_stime.tv_usec * 1000LL;
  close (sv[0]);

  printf ("%s\t%d\t%d\t%ld\t%lld\t%.1f\t%lld\n", name, size, rep, rounds,
          (long long) wall, rounds * 1e9 / wall, (long long) (cpu / rounds));
  fflush (stdout);
}

/* A SOCK_DGRAM group, so that the series' hooks are live from now on. */
static void
create_group (void)
{
#ifdef UNIX_CREATE_GROUP
  struct unix_mreq mreq = { .address.sun_family = AF_UNIX };
  int fd = socket (AF_UNIX, SOCK_DGRAM, 0);

  mreq.address_len = offsetof (struct sockaddr_un, sun_path);
  if (fd < 0 || setsockopt (fd, SOL_UNIX, UNIX_CREATE_GROUP, &mreq, sizeof mreq) < 0)
    die ("UNIX_CREATE_GROUP");
  /* kept open: the hooks stay live whatever happens to the group */
#else
  errno = ENOSYS;
  die ("built without the multicast UAPI");
#endif
}

int
main (int argc, char **argv)
{
  long rounds = 20000;
  long sizes[8] = { 64, 4096 };
  int n_sizes = 2, reps = 3, i, s, r;

  for (i = 1; i < argc; i++)
    {
      if (!strcmp (argv[i], "--rounds") && i + 1 < argc)
        rounds = atol (argv[++i]);
      else if (!strcmp (argv[i], "--sizes") && i + 1 < argc)
        n_sizes = parse_list (argv[++i], sizes, 8);
      else if (!strcmp (argv[i], "--reps") && i + 1 < argc)
        reps = atoi (argv[++i]);
      else if (!strcmp (argv[i], "--group"))
        create_group ();
      else
        {
          fprintf (stderr, "usage: bench-pingpong [--rounds N] [--sizes B,...] "
                   "[--reps R] [--group]\n");
          return 2;
        }
    }
  for (s = 0; s < n_sizes; s++)
    if (sizes[s] <= 0 || sizes[s] > MAX_SIZE)
      {
        fprintf (stderr, "bench-pingpong: size %ld out of range\n", sizes[s]);
        return 2;
      }

  printf ("# type\tsize\trep\trounds\twall_ns\tround_trips_per_s\tcpu_ns\n");
  /* Repetitions interleave the types, so drift hits both alike. */
  for (r = 0; r < reps; r++)
    for (s = 0; s < n_sizes; s++)
      {
        run (SOCK_DGRAM, "dgram", (int) sizes[s], r, rounds);
        run (SOCK_SEQPACKET, "seqpacket", (int) sizes[s], r, rounds);
      }
  return 0;
}
