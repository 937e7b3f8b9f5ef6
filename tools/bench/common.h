/* Helpers shared by the benchmark programs (bench-raw.c, bench-bus.c):
 * clocks, CPU accounting, pipes, option lists.  Each program defines
 * bench_name before including this header.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static inline void
die (const char *what)
{
  fprintf (stderr, "%s: %s: %s\n", bench_name, what, strerror (errno));
  exit (2);
}

static inline int64_t
clock_ns (clockid_t clock)
{
  struct timespec ts;

  clock_gettime (clock, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int64_t
ticks_to_ns (unsigned long long ticks)
{
  return (int64_t) ticks * (1000000000LL / sysconf (_SC_CLK_TCK));
}

/* Busy time of all CPUs since boot, from the first line of /proc/stat
 * (user nice system idle iowait irq softirq steal ...): it also counts
 * work charged to kernel threads, such as deferred softirqs. */
static inline int64_t
system_busy_ns (void)
{
  unsigned long long v[8] = { 0 };
  FILE *f = fopen ("/proc/stat", "r");

  if (!f || fscanf (f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu",
                    &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
    die ("/proc/stat");
  fclose (f);
  return ticks_to_ns (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
}

/* CPU time (user + system) of another process, from /proc/PID/stat; 0
 * when @pid is 0 (nothing to measure). */
static inline int64_t
process_cpu_ns (pid_t pid)
{
  unsigned long long utime, stime;
  char path[64], line[1024], *p;
  FILE *f;

  if (!pid)
    return 0;
  snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
  f = fopen (path, "r");
  if (!f || !fgets (line, sizeof line, f))
    die (path);
  fclose (f);
  /* Fields 14 and 15, counted after the ")" that ends field 2. */
  p = strrchr (line, ')');
  if (!p || sscanf (p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                    &utime, &stime) != 2)
    die (path);
  return ticks_to_ns (utime + stime);
}

static inline int
read_full (int fd, void *buf, size_t len)
{
  char *p = buf;

  while (len)
    {
      ssize_t n = read (fd, p, len);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return -1;
      p += n;
      len -= n;
    }
  return 0;
}

/* Parse a comma-separated list of numbers into @v (at most @max). */
static inline int
parse_list (const char *s, long *v, int max)
{
  int n = 0;
  char *end;

  while (*s && n < max)
    {
      v[n++] = strtol (s, &end, 10);
      if (end == s || (*end && *end != ','))
        {
          fprintf (stderr, "%s: bad number list \"%s\"\n", bench_name, s);
          exit (2);
        }
      s = *end ? end + 1 : end;
    }
  return n;
}

static inline int
compare_int64 (const void *a, const void *b)
{
  int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;

  return (x > y) - (x < y);
}

/* The @q quantile (0..1) of @n samples, which it sorts. */
static inline int64_t
quantile (int64_t *v, long n, double q)
{
  if (!n)
    return 0;
  qsort (v, n, sizeof *v, compare_int64);
  return v[(long) (q * (n - 1) + 0.5)];
}

#endif
