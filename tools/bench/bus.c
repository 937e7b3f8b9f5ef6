/* bench-bus: what a libdbus client sees of a bus, measured the same way on
 * every bus: dbus-daemon, dbus-broker, our fork, or a direct peer-to-peer
 * connection.  (make bench)
 *
 *   bench-bus rtt [--address ADDR | --p2p] [--sizes B,...] [--calls C]
 *                 [--tick | --stalled]
 *   bench-bus signal --address ADDR [--sizes B,...] [--subscribers N,...]
 *                    [--matching half|tenth|one,...] [--rules R,...]
 *                    [--messages M] [--window W]
 *   bench-bus join --address ADDR [--clients N,...] [--joins J]
 * common options: --label NAME (first column) --daemon-pid PID --reps R
 *
 * rtt: a server process owns a name and echoes a byte array; the client
 * calls it C times, each call waiting for its reply, and checks that the
 * reply carries back what it sent.  With --p2p there is no bus: the server
 * listens itself (DBusServer) and the client connects to it, the limit any
 * bus can approach.
 *
 * rtt --tick: before every call the client also broadcasts a Tick signal
 * of the same size that no client has a rule for.  rtt --stalled: the same
 * with one more client on the bus, a process that adds a rule for Tick and
 * then stops itself (SIGSTOP, as a program held in a debugger): it never
 * reads what the bus sends it.  The calls should go as fast as with --tick
 * alone; a bus that makes the caller wait for the stopped client fails the
 * run when a call times out (CALL_TIMEOUT_MS).
 *
 * signal: N subscriber processes; (N + 1) / 2 of them (--matching half, the
 * default; tenth: (N + 9) / 10; one: 1, a selective broadcast) have a
 * match rule for the benchmark's signal, the others a rule for a signal
 * nobody sends, and
 * each has R - 1 further rules that match nothing (R = 1 by default; a
 * sweep of R is the filter-scaling benchmark).  The emitter broadcasts M
 * signals carrying a sequence number and the send time, keeping at most W
 * of them in flight per subscriber (the subscribers publish their progress
 * in shared memory, so the window costs no bus traffic and no queue grows
 * without bound): deliveries per second.  Then it sends M / 10 more one at
 * a time (W = 1): latency from send to receipt, unloaded.  Subscribers
 * check every sequence number: a lost, reordered or misrouted signal is
 * counted and makes the exit status 1.
 *
 * join: N clients are connected (one process holds them all and reads
 * and drops whatever reaches them); then a new client connects and says
 * Hello (the connect+Hello latency), adds one match rule (the AddMatch
 * round trip) and disconnects, J times.  The daemon's CPU per join
 * includes the departure.  What a bus spends on each connection it
 * already has shows as growth from N = 10 to N = 1000.
 *
 * The daemon's CPU time (--daemon-pid, from /proc/PID/stat), the whole
 * machine's busy time and, for signals, the emitter's own CPU time are
 * reported per call or per delivery.  Output: one
 * tab-separated line per run after a "#" header; progress on stderr.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/futex.h>

#include <dbus/dbus.h>

static const char bench_name[] = "bench-bus";
#include "common.h"

#define BENCH_NAME "org.dbusmcast.Bench"
#define BENCH_PATH "/org/dbusmcast/Bench"
#define BENCH_IFACE "org.dbusmcast.Bench"
#define MAX_SIZE 4096
#define CALL_TIMEOUT_MS 60000
/* A window wait that makes no progress for this long means a subscriber
 * lost a signal: the emitter goes on and the loss is reported. */
#define STALL_NS (10 * 1000000000LL)
/* How long to wait for the subscribers' reports after the last signal. */
#define REPORT_TIMEOUT_MS 60000

struct options {
  const char *label;
  const char *address;
  int p2p;
  int tick, stalled;
  pid_t daemon_pid;
  int reps;
  long sizes[4];
  int n_sizes;
  long calls;
  long subscribers[8];
  int n_subscribers;
  long rules[8];
  int n_rules;
  const char *matchings[4];    /* half, tenth, one */
  int n_matchings;
  long messages;
  long window;
  long clients[4];
  int n_clients;
  long joins;
};

static void
die_dbus (const char *what, DBusError *err)
{
  fprintf (stderr, "bench-bus: %s: %s\n", what, err->message ? err->message : "out of memory");
  exit (2);
}

static DBusConnection *
open_connection (const char *address, int register_on_bus)
{
  DBusError err = DBUS_ERROR_INIT;
  DBusConnection *c = dbus_connection_open_private (address, &err);

  if (!c)
    die_dbus (address, &err);
  if (register_on_bus && !dbus_bus_register (c, &err))
    die_dbus ("Hello", &err);
  return c;
}

static void
close_connection (DBusConnection *c)
{
  dbus_connection_close (c);
  dbus_connection_unref (c);
}


/* Fork a child of the benchmark that dies with it, however the benchmark
 * ends: a child holds the driver's end of stdout open, and a stopped one
 * would never end by itself. */
static pid_t
fork_child (void)
{
  pid_t parent = getpid ();
  pid_t pid = fork ();

  if (pid < 0)
    die ("fork");
  if (pid == 0 && (prctl (PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid () != parent))
    _exit (2);
  return pid;
}

/* The payload of every call, reply and signal: a byte array of @size bytes
 * whose first eight bytes are @seq and next eight the send time. */
static DBusMessage *
with_payload (DBusMessage *msg, unsigned char *buf, int size,
              uint64_t seq)
{
  const unsigned char *p = buf;
  int64_t now = clock_ns (CLOCK_MONOTONIC);

  if (!msg)
    die ("dbus_message_new");
  memcpy (buf, &seq, sizeof seq);
  memcpy (buf + sizeof seq, &now, sizeof now);
  if (!dbus_message_append_args (msg, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &p, size,
                                 DBUS_TYPE_INVALID))
    die ("dbus_message_append_args");
  return msg;
}

/* The payload of @msg, or NULL when it has none or another type. */
static const unsigned char *
payload (DBusMessage *msg, int *len)
{
  const unsigned char *bytes;

  if (!dbus_message_get_args (msg, NULL, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &bytes, len,
                              DBUS_TYPE_INVALID))
    return NULL;
  return bytes;
}

static void
send_and_unref (DBusConnection *c, DBusMessage *msg)
{
  if (!dbus_connection_send (c, msg, NULL))
    die ("dbus_connection_send");
  dbus_message_unref (msg);
}

static void
add_match (DBusConnection *c, const char *member)
{
  DBusError err = DBUS_ERROR_INIT;
  char rule[256];

  snprintf (rule, sizeof rule, "type='signal',interface='%s',member='%s'", BENCH_IFACE, member);
  dbus_bus_add_match (c, rule, &err);
  if (dbus_error_is_set (&err))
    die_dbus (rule, &err);
}

/* ---- rtt: method call round trips ---- */

/* Echo's server: reply with the call's payload; Quit ends serve(). */
static DBusHandlerResult
echo (DBusConnection *c, DBusMessage *msg, void *quit)
{
  DBusMessage *reply;
  const unsigned char *bytes;
  int len;

  if (dbus_message_is_method_call (msg, BENCH_IFACE, "Quit"))
    *(int *) quit = 1;
  else if (!dbus_message_is_method_call (msg, BENCH_IFACE, "Echo"))
    return DBUS_HANDLER_RESULT_NOT_YET_HANDLED;
  reply = dbus_message_new_method_return (msg);
  bytes = payload (msg, &len);
  if (!reply || (bytes && !dbus_message_append_args (reply, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE,
                                                     &bytes, len, DBUS_TYPE_INVALID)))
    die ("reply");
  send_and_unref (c, reply);
  return DBUS_HANDLER_RESULT_HANDLED;
}

static void
serve (DBusConnection *c)
{
  int quit = 0;

  if (!dbus_connection_add_filter (c, echo, &quit, NULL))
    die ("dbus_connection_add_filter");
  while (!quit && dbus_connection_read_write_dispatch (c, -1))
    ;
  dbus_connection_flush (c);
  close_connection (c);
}

static void
write_address (int fd, const char *address)
{
  size_t len = strlen (address) + 1;

  if (write (fd, address, len) != (ssize_t) len)
    die ("write(address)");
  close (fd);
}

static void
serve_on_bus (const char *address, int ready_fd)
{
  DBusError err = DBUS_ERROR_INIT;
  DBusConnection *c = open_connection (address, 1);

  if (dbus_bus_request_name (c, BENCH_NAME, DBUS_NAME_FLAG_DO_NOT_QUEUE, &err)
      != DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER)
    die_dbus ("RequestName", &err);
  write_address (ready_fd, address);
  serve (c);
}

/* Peer to peer: a DBusServer of our own, polled until one client came. */
static DBusWatch *listen_watch;
static DBusConnection *p2p_client;

static dbus_bool_t
add_listen_watch (DBusWatch *watch, void *data)
{
  listen_watch = watch;
  return TRUE;
}

static void
remove_listen_watch (DBusWatch *watch, void *data)
{
  if (listen_watch == watch)
    listen_watch = NULL;
}

static void
new_p2p_client (DBusServer *server, DBusConnection *c, void *data)
{
  p2p_client = dbus_connection_ref (c);
}

static void
serve_p2p (int ready_fd)
{
  DBusError err = DBUS_ERROR_INIT;
  DBusServer *server = dbus_server_listen ("unix:tmpdir=/tmp", &err);
  char *address;

  if (!server)
    die_dbus ("dbus_server_listen", &err);
  dbus_server_set_new_connection_function (server, new_p2p_client, NULL, NULL);
  if (!dbus_server_set_watch_functions (server, add_listen_watch, remove_listen_watch,
                                        NULL, NULL, NULL) || !listen_watch)
    die ("dbus_server_set_watch_functions");
  address = dbus_server_get_address (server);
  write_address (ready_fd, address);
  dbus_free (address);
  while (!p2p_client)
    {
      struct pollfd pfd = { .fd = dbus_watch_get_unix_fd (listen_watch), .events = POLLIN };

      if (poll (&pfd, 1, -1) < 0 && errno != EINTR)
        die ("poll");
      dbus_watch_handle (listen_watch, DBUS_WATCH_READABLE);
    }
  dbus_server_disconnect (server);
  dbus_server_unref (server);
  serve (p2p_client);
}

/* One Echo call; 1 when the reply carries back exactly what was sent. */
static int
call_echo (DBusConnection *c, const char *dest, const char *member,
           unsigned char *buf, int size, uint64_t seq)
{
  DBusError err = DBUS_ERROR_INIT;
  DBusMessage *call, *reply;
  const unsigned char *bytes;
  int len, ok;

  call = with_payload (dbus_message_new_method_call (dest, BENCH_PATH, BENCH_IFACE, member),
                       buf, size, seq);
  reply = dbus_connection_send_with_reply_and_block (c, call, CALL_TIMEOUT_MS, &err);
  if (!reply)
    die_dbus (member, &err);
  bytes = payload (reply, &len);
  ok = bytes && len == size && !memcmp (bytes, buf, size);
  dbus_message_unref (call);
  dbus_message_unref (reply);
  return ok;
}

/* An Echo call; with --tick, a Tick signal of the same size goes first. */
static int
tick_and_echo (const struct options *o, DBusConnection *c, const char *dest,
               unsigned char *buf, int size, uint64_t seq)
{
  if (o->tick)
    send_and_unref (c, with_payload (dbus_message_new_signal (BENCH_PATH, BENCH_IFACE, "Tick"),
                                     buf, size, seq));
  return call_echo (c, dest, "Echo", buf, size, seq);
}

/* rtt --stalled: the subscriber that stopped itself, 0 when none. */
static pid_t stalled_pid;

/* The stalled subscriber: a rule for Tick, then it says so on @ready_fd
 * and stops for good (a SIGCONT only stops it again), never reading. */
static void
subscribe_and_stop (const char *address, int ready_fd)
{
  DBusConnection *c;

  c = open_connection (address, 1);
  add_match (c, "Tick");
  if (write (ready_fd, "r", 1) != 1)
    die ("write(ready)");
  close (ready_fd);
  for (;;)
    raise (SIGSTOP);
}

/* Fork the stalled subscriber; return once it has its rule and stopped. */
static void
start_stalled (const char *address)
{
  int ready[2], status;
  char ch;

  if (pipe (ready) < 0)
    die ("pipe");
  stalled_pid = fork_child ();
  if (stalled_pid == 0)
    {
      close (ready[0]);
      subscribe_and_stop (address, ready[1]);
      _exit (0);
    }
  close (ready[1]);
  if (read (ready[0], &ch, 1) != 1)
    {
      fprintf (stderr, "bench-bus: the stalled subscriber did not start\n");
      exit (2);
    }
  close (ready[0]);
  if (waitpid (stalled_pid, &status, WUNTRACED) != stalled_pid)
    die ("waitpid");
  if (!WIFSTOPPED (status))
    {
      stalled_pid = 0;
      fprintf (stderr, "bench-bus: the stalled subscriber ended instead of stopping\n");
      exit (2);
    }
}

/* Kill and reap the stalled subscriber, if any: after each run, and at
 * exit when a run fails. */
static void
kill_stalled (void)
{
  if (stalled_pid > 0)
    {
      kill (stalled_pid, SIGKILL);
      waitpid (stalled_pid, NULL, 0);
    }
  stalled_pid = 0;
}

static int
rtt_run (const struct options *o, int size, int rep)
{
  const char *dest = o->p2p ? NULL : BENCH_NAME;
  static unsigned char buf[MAX_SIZE];
  int64_t *lat, t0, wall, daemon_cpu, busy;
  long i, bad = 0, warmup = o->calls / 10;
  char address[512];
  int ready[2];
  DBusConnection *c;
  pid_t server;

  if (pipe (ready) < 0)
    die ("pipe");
  server = fork_child ();
  if (server == 0)
    {
      close (ready[0]);
      if (o->p2p)
        serve_p2p (ready[1]);
      else
        serve_on_bus (o->address, ready[1]);
      _exit (0);
    }
  close (ready[1]);
  for (i = 0; i < (long) sizeof address - 1; i++)
    if (read (ready[0], &address[i], 1) != 1 || !address[i])
      break;
  address[i] = 0;
  close (ready[0]);
  if (!address[0])
    {
      fprintf (stderr, "bench-bus: the echo server did not start\n");
      exit (2);
    }

  /* After the server: a server forked later would inherit stalled_pid, and
   * kill the subscriber if it exited through die(). */
  if (o->stalled)
    start_stalled (o->address);
  c = open_connection (address, !o->p2p);
  lat = calloc (o->calls, sizeof *lat);
  if (!lat)
    die ("calloc");
  for (i = 0; i < warmup; i++)
    bad += !tick_and_echo (o, c, dest, buf, size, i);

  daemon_cpu = process_cpu_ns (o->daemon_pid);
  busy = system_busy_ns ();
  t0 = clock_ns (CLOCK_MONOTONIC);
  for (i = 0; i < o->calls; i++)
    {
      int64_t start = clock_ns (CLOCK_MONOTONIC);

      bad += !tick_and_echo (o, c, dest, buf, size, i);
      lat[i] = clock_ns (CLOCK_MONOTONIC) - start;
    }
  wall = clock_ns (CLOCK_MONOTONIC) - t0;
  busy = system_busy_ns () - busy;
  daemon_cpu = process_cpu_ns (o->daemon_pid) - daemon_cpu;

  bad += !call_echo (c, dest, "Quit", buf, size, 0);
  close_connection (c);
  waitpid (server, NULL, 0);
  kill_stalled ();

  printf ("%s\t%d\t%d\t%ld\t%ld\t%lld\t%.0f\t%lld\t%lld\t%.0f\t%.0f\n",
          o->label, size, rep, o->calls, bad, (long long) wall, o->calls * 1e9 / wall,
          (long long) quantile (lat, o->calls, 0.5), (long long) quantile (lat, o->calls, 0.99),
          o->daemon_pid ? (double) daemon_cpu / o->calls : -1, (double) busy / o->calls);
  fflush (stdout);
  fprintf (stderr, "bench-bus: rtt %-14s %4d B rep %d: %8.0f calls/s, median %lld us%s\n",
           o->label, size, rep, o->calls * 1e9 / wall,
           (long long) quantile (lat, o->calls, 0.5) / 1000,
           bad ? " (WRONG REPLIES)" : "");
  free (lat);
  return bad != 0;
}

/* ---- signal: broadcast to subscribers ---- */

/* What a subscriber shares with the emitter. */
struct subscriber {
  _Atomic uint32_t progress;  /* signals received, counted by sequence number */
  _Atomic uint32_t waiting;   /* the emitter sleeps on progress */
  int stalled;                /* the emitter gave up waiting for it */
  int64_t end_ns;             /* when its last throughput signal arrived */
  long delivered;             /* throughput signals received */
  long lost, disorder, misrouted;
  int reported;
};

struct subscription {
  struct subscriber *s;
  int64_t *latency;           /* one per latency-phase signal, 0: not received */
  long throughput, total;     /* signals of the throughput phase, of both */
  int size, matching, done;
};

static void
publish (struct subscriber *s, uint32_t progress)
{
  atomic_store (&s->progress, progress);
  if (atomic_load (&s->waiting))
    {
      atomic_store (&s->waiting, 0);
      syscall (SYS_futex, &s->progress, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
}

static DBusHandlerResult
on_signal (DBusConnection *c, DBusMessage *msg, void *data)
{
  struct subscription *x = data;
  struct subscriber *s = x->s;
  int64_t now = clock_ns (CLOCK_MONOTONIC), sent;
  const unsigned char *bytes;
  uint64_t seq;
  int len;

  if (dbus_message_get_type (msg) != DBUS_MESSAGE_TYPE_SIGNAL
      || !dbus_message_has_interface (msg, BENCH_IFACE))
    return DBUS_HANDLER_RESULT_NOT_YET_HANDLED;
  if (dbus_message_has_member (msg, "Done"))
    {
      x->done = 1;
      return DBUS_HANDLER_RESULT_HANDLED;
    }
  if (!x->matching || !dbus_message_has_member (msg, "Tick"))
    {
      s->misrouted++;
      return DBUS_HANDLER_RESULT_HANDLED;
    }
  bytes = payload (msg, &len);
  if (!bytes || len != x->size)
    {
      s->disorder++;
      return DBUS_HANDLER_RESULT_HANDLED;
    }
  memcpy (&seq, bytes, sizeof seq);
  memcpy (&sent, bytes + sizeof seq, sizeof sent);
  if (seq < atomic_load (&s->progress) || seq >= (uint64_t) x->total)
    {
      s->disorder++;
      return DBUS_HANDLER_RESULT_HANDLED;
    }
  s->lost += seq - atomic_load (&s->progress);
  if (seq < (uint64_t) x->throughput)
    {
      s->delivered++;
      s->end_ns = now;
    }
  else
    {
      x->latency[seq - x->throughput] = now - sent;
    }
  publish (s, seq + 1);
  return DBUS_HANDLER_RESULT_HANDLED;
}

/* A subscriber process: its rules, then receive until Done. */
static void
subscribe (const char *address, struct subscription *x, long rules, int ready_fd)
{
  DBusConnection *c = open_connection (address, 1);
  long r;

  add_match (c, x->matching ? "Tick" : "Tock");
  for (r = 1; r < rules; r++)
    {
      char member[32];

      snprintf (member, sizeof member, "Unused%ld", r);
      add_match (c, member);
    }
  add_match (c, "Done");
  if (!dbus_connection_add_filter (c, on_signal, x, NULL))
    die ("dbus_connection_add_filter");
  if (write (ready_fd, "r", 1) != 1)
    die ("write(ready)");
  while (!x->done && dbus_connection_read_write_dispatch (c, -1))
    ;
  if (x->matching)
    x->s->lost += x->total - atomic_load (&x->s->progress);
  x->s->reported = 1;
  close_connection (c);
}

/* Wait until @s received @target signals; give up on it after STALL_NS
 * without progress (it lost one: the count will say so). */
static void
wait_progress (struct subscriber *s, uint32_t target)
{
  int64_t deadline = clock_ns (CLOCK_MONOTONIC) + STALL_NS;
  struct timespec tick = { .tv_sec = 1 };

  while (!s->stalled)
    {
      uint32_t seen = atomic_load (&s->progress);

      if (seen >= target)
        return;
      if (clock_ns (CLOCK_MONOTONIC) > deadline)
        {
          fprintf (stderr, "bench-bus: a subscriber stalled at signal %u\n", seen);
          s->stalled = 1;
          return;
        }
      atomic_store (&s->waiting, 1);
      syscall (SYS_futex, &s->progress, FUTEX_WAIT, seen, &tick, NULL, 0);
    }
}

static void
wait_all (DBusConnection *c, struct subscriber *subs, int matching, uint32_t target)
{
  int i;

  dbus_connection_flush (c);
  for (i = 0; i < matching; i++)
    wait_progress (&subs[i], target);
}

/* Wait for every subscriber to exit; 0 if one did not in time. */
static int
reap (pid_t *pids, int n)
{
  int64_t deadline = clock_ns (CLOCK_MONOTONIC) + REPORT_TIMEOUT_MS * 1000000LL;
  int left = n, i, ok = 1;

  while (left && clock_ns (CLOCK_MONOTONIC) < deadline)
    {
      for (i = 0; i < n; i++)
        if (pids[i] && waitpid (pids[i], NULL, WNOHANG) == pids[i])
          {
            pids[i] = 0;
            left--;
          }
      if (left)
        usleep (10000);
    }
  for (i = 0; i < n; i++)
    if (pids[i])
      {
        kill (pids[i], SIGKILL);
        waitpid (pids[i], NULL, 0);
        ok = 0;
      }
  return ok;
}

/* How many of @n subscribers match, for --matching @spec; 0 if unknown */
static int
matching_of (const char *spec, int n)
{
  if (!strcmp (spec, "half"))
    return (n + 1) / 2;
  if (!strcmp (spec, "tenth"))
    return (n + 9) / 10;
  if (!strcmp (spec, "one"))
    return 1;
  return 0;
}

/* --matching: a comma-separated list of half, tenth, one */
static int
parse_matchings (char *s, const char **v, int max)
{
  char *word, *save;
  int n = 0;

  for (word = strtok_r (s, ",", &save); word && n < max; word = strtok_r (NULL, ",", &save))
    {
      if (!matching_of (word, 10))
        {
          fprintf (stderr, "bench-bus: --matching takes half, tenth or one\n");
          exit (2);
        }
      v[n++] = word;
    }
  return n;
}

static int
signal_run (const struct options *o, int size, int n, int matching, long rules, int rep)
{
  long m = o->messages, l = m / 10 > 10 ? m / 10 : 10, total = m + l, i, samples = 0;
  int ready[2], failed;
  static unsigned char buf[MAX_SIZE];
  struct subscriber *subs;
  struct subscriber sum = { 0 };
  int64_t *latency, t0, end = 0, daemon_cpu, busy, emitter_cpu;
  size_t shm_size = n * sizeof *subs + (size_t) matching * l * sizeof *latency;
  pid_t *pids = calloc (n, sizeof *pids);
  DBusConnection *c;
  char ch;

  subs = mmap (NULL, shm_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (subs == MAP_FAILED || !pids || pipe (ready) < 0)
    die ("setup");
  latency = (int64_t *) (subs + n);
  for (i = 0; i < n; i++)
    {
      pids[i] = fork_child ();
      if (pids[i] == 0)
        {
          struct subscription x = {
            .s = &subs[i], .latency = i < matching ? latency + i * l : NULL,
            .throughput = m, .total = total,
            .size = size, .matching = i < matching,
          };

          close (ready[0]);
          subscribe (o->address, &x, rules, ready[1]);
          _exit (0);
        }
    }
  close (ready[1]);
  for (i = 0; i < n; i++)
    if (read (ready[0], &ch, 1) != 1)
      {
        fprintf (stderr, "bench-bus: a subscriber did not start\n");
        exit (2);
      }
  close (ready[0]);

  c = open_connection (o->address, 1);
  daemon_cpu = process_cpu_ns (o->daemon_pid);
  busy = system_busy_ns ();
  emitter_cpu = clock_ns (CLOCK_PROCESS_CPUTIME_ID);
  t0 = clock_ns (CLOCK_MONOTONIC);
  for (i = 0; i < total; i++)
    {
      long window = i < m ? o->window : 1;

      if (i == m)
        {
          wait_all (c, subs, matching, m);
          daemon_cpu = process_cpu_ns (o->daemon_pid) - daemon_cpu;
          busy = system_busy_ns () - busy;
          emitter_cpu = clock_ns (CLOCK_PROCESS_CPUTIME_ID) - emitter_cpu;
        }
      if (i >= window)
        wait_all (c, subs, matching, i - window + 1);
      send_and_unref (c, with_payload (dbus_message_new_signal (BENCH_PATH, BENCH_IFACE, "Tick"),
                                       buf, size, i));
    }
  wait_all (c, subs, matching, total);
  send_and_unref (c, dbus_message_new_signal (BENCH_PATH, BENCH_IFACE, "Done"));
  dbus_connection_flush (c);
  failed = !reap (pids, n);
  close_connection (c);

  for (i = 0; i < n; i++)
    {
      sum.delivered += subs[i].delivered;
      sum.lost += subs[i].lost;
      sum.disorder += subs[i].disorder;
      sum.misrouted += subs[i].misrouted;
      failed |= !subs[i].reported;
      if (subs[i].end_ns > end)
        end = subs[i].end_ns;
    }
  for (i = 0; i < matching * l; i++)
    if (latency[i])
      latency[samples++] = latency[i];
  failed |= sum.lost || sum.disorder || sum.misrouted;

  printf ("%s\t%d\t%d\t%d\t%ld\t%d\t%ld\t%ld\t%ld\t%ld\t%ld\t%ld\t%lld\t%.0f\t%lld\t%lld\t%.0f\t%.0f"
          "\t%.0f\n",
          o->label, size, n, matching, rules, rep, m, matching * m, sum.delivered, sum.lost,
          sum.disorder, sum.misrouted, (long long) (end - t0), sum.delivered * 1e9 / (end - t0),
          (long long) quantile (latency, samples, 0.5), (long long) quantile (latency, samples, 0.99),
          o->daemon_pid && sum.delivered ? (double) daemon_cpu / sum.delivered : -1,
          sum.delivered ? (double) busy / sum.delivered : 0,
          sum.delivered ? (double) emitter_cpu / sum.delivered : 0);
  fflush (stdout);
  fprintf (stderr, "bench-bus: signal %-14s %4d B N=%-3d matching %-3d rules %-3ld rep %d:"
           " %8.0f deliveries/s, latency median %lld us%s\n", o->label, size, n, matching, rules, rep,
           sum.delivered * 1e9 / (end - t0), (long long) quantile (latency, samples, 0.5) / 1000,
           failed ? " (LOST, DISORDERED OR MISROUTED SIGNALS)" : "");
  munmap (subs, shm_size);
  free (pids);
  return failed;
}

/* ---- join: connect+Hello and AddMatch with N clients on the bus ---- */

/* The N clients: connected, registered, reading and dropping what they
 * get, until killed */
static void
hold_clients (const char *address, long n, int ready_fd)
{
  struct rlimit fds = { n + 64, n + 64 };
  DBusConnection **c = calloc (n, sizeof *c);
  struct pollfd *p = calloc (n, sizeof *p);
  DBusMessage *m;
  long i;

  if (!c || !p)
    die ("calloc");
  /* Root in the VM: as many descriptors as clients */
  if (setrlimit (RLIMIT_NOFILE, &fds) < 0 && n + 64 > 1024)
    die ("setrlimit");
  for (i = 0; i < n; i++)
    {
      int fd;

      c[i] = open_connection (address, 1);
      if (!dbus_connection_get_socket (c[i], &fd))
        die ("dbus_connection_get_socket");
      p[i].fd = fd;
      p[i].events = POLLIN;
    }
  if (write (ready_fd, "", 1) != 1)
    die ("write");
  close (ready_fd);

  for (;;)
    {
      if (poll (p, n, -1) < 0 && errno != EINTR)
        die ("poll");
      for (i = 0; i < n; i++)
        {
          if (!p[i].revents)
            continue;
          if (!dbus_connection_read_write (c[i], 0))
            _exit (0);
          while ((m = dbus_connection_pop_message (c[i])) != NULL)
            dbus_message_unref (m);
        }
    }
}

static int
join_run (const struct options *o, long n, int rep)
{
  int64_t *hello, *match, t0, t1, wall = 0, daemon_cpu = 0, busy = 0;
  long i, warmup = o->joins / 10;
  int ready[2];
  char byte;
  pid_t holder;

  if (pipe (ready) < 0)
    die ("pipe");
  holder = fork_child ();
  if (holder == 0)
    {
      close (ready[0]);
      hold_clients (o->address, n, ready[1]);
      _exit (0);
    }
  close (ready[1]);
  if (read (ready[0], &byte, 1) != 1)
    {
      fprintf (stderr, "bench-bus: the %ld clients did not connect\n", n);
      exit (2);
    }
  close (ready[0]);

  hello = calloc (o->joins, sizeof *hello);
  match = calloc (o->joins, sizeof *match);
  if (!hello || !match)
    die ("calloc");
  for (i = -warmup; i < o->joins; i++)
    {
      DBusConnection *c;

      if (i == 0)
        {
          daemon_cpu = process_cpu_ns (o->daemon_pid);
          busy = system_busy_ns ();
          wall = clock_ns (CLOCK_MONOTONIC);
        }
      t0 = clock_ns (CLOCK_MONOTONIC);
      c = open_connection (o->address, 1);
      t1 = clock_ns (CLOCK_MONOTONIC);
      add_match (c, "Joined");
      if (i >= 0)
        {
          hello[i] = t1 - t0;
          match[i] = clock_ns (CLOCK_MONOTONIC) - t1;
        }
      close_connection (c);
    }
  wall = clock_ns (CLOCK_MONOTONIC) - wall;
  busy = system_busy_ns () - busy;
  daemon_cpu = process_cpu_ns (o->daemon_pid) - daemon_cpu;

  kill (holder, SIGKILL);
  waitpid (holder, NULL, 0);

  printf ("%s\t%ld\t%d\t%ld\t%lld\t%lld\t%lld\t%lld\t%lld\t%.0f\t%.0f\n",
          o->label, n, rep, o->joins, (long long) wall,
          (long long) quantile (hello, o->joins, 0.5), (long long) quantile (hello, o->joins, 0.99),
          (long long) quantile (match, o->joins, 0.5), (long long) quantile (match, o->joins, 0.99),
          o->daemon_pid ? (double) daemon_cpu / o->joins : -1, (double) busy / o->joins);
  fflush (stdout);
  fprintf (stderr, "bench-bus: join %-14s N %4ld rep %d: Hello median %lld us, AddMatch median %lld us\n",
           o->label, n, rep, (long long) quantile (hello, o->joins, 0.5) / 1000,
           (long long) quantile (match, o->joins, 0.5) / 1000);
  free (hello);
  free (match);
  return 0;
}

static void
usage (void)
{
  fprintf (stderr,
           "usage: bench-bus rtt [--address ADDR | --p2p] [--sizes B,...] [--calls C]\n"
           "                 [--tick | --stalled]\n"
           "       bench-bus signal --address ADDR [--sizes B,...] [--subscribers N,...]\n"
           "                 [--matching half|tenth|one,...] [--rules R,...] [--messages M]\n"
           "                 [--window W]\n"
           "       bench-bus join --address ADDR [--clients N,...] [--joins J]\n"
           "       common: [--label NAME] [--daemon-pid PID] [--reps R]\n");
  exit (2);
}

int
main (int argc, char **argv)
{
  struct options o = {
    .label = "bus", .reps = 5, .sizes = { 64, 4096 }, .n_sizes = 2, .calls = 10000,
    .subscribers = { 1, 10, 100 }, .n_subscribers = 3, .rules = { 1 }, .n_rules = 1,
    .matchings = { "half" }, .n_matchings = 1, .messages = 2000, .window = 64,
    .clients = { 10, 100, 1000 }, .n_clients = 3, .joins = 200,
  };
  int rtt, join, i, s, k, w, r, rep, failed = 0;

  if (argc < 2 || (strcmp (argv[1], "rtt") && strcmp (argv[1], "signal") &&
                   strcmp (argv[1], "join")))
    usage ();
  rtt = !strcmp (argv[1], "rtt");
  join = !strcmp (argv[1], "join");
  for (i = 2; i < argc; i++)
    {
      if (!strcmp (argv[i], "--p2p"))
        {
          o.p2p = 1;
          continue;
        }
      if (!strcmp (argv[i], "--tick") || !strcmp (argv[i], "--stalled"))
        {
          o.tick = 1;
          o.stalled |= !strcmp (argv[i], "--stalled");
          continue;
        }
      if (i + 1 >= argc)
        usage ();
      if (!strcmp (argv[i], "--address"))
        o.address = argv[++i];
      else if (!strcmp (argv[i], "--label"))
        o.label = argv[++i];
      else if (!strcmp (argv[i], "--daemon-pid"))
        o.daemon_pid = atoi (argv[++i]);
      else if (!strcmp (argv[i], "--reps"))
        o.reps = atoi (argv[++i]);
      else if (!strcmp (argv[i], "--sizes"))
        o.n_sizes = parse_list (argv[++i], o.sizes, 4);
      else if (!strcmp (argv[i], "--calls"))
        o.calls = atol (argv[++i]);
      else if (!strcmp (argv[i], "--subscribers"))
        o.n_subscribers = parse_list (argv[++i], o.subscribers, 8);
      else if (!strcmp (argv[i], "--rules"))
        o.n_rules = parse_list (argv[++i], o.rules, 8);
      else if (!strcmp (argv[i], "--matching"))
        o.n_matchings = parse_matchings (argv[++i], o.matchings, 4);
      else if (!strcmp (argv[i], "--messages"))
        o.messages = atol (argv[++i]);
      else if (!strcmp (argv[i], "--window"))
        o.window = atol (argv[++i]);
      else if (!strcmp (argv[i], "--clients"))
        o.n_clients = parse_list (argv[++i], o.clients, 4);
      else if (!strcmp (argv[i], "--joins"))
        o.joins = atol (argv[++i]);
      else
        usage ();
    }
  if ((!o.address && !(rtt && o.p2p)) || (o.p2p && !rtt) || (o.tick && !rtt)
      || (o.stalled && o.p2p) || o.calls < 1 || o.messages < 1 || o.window < 1
      || o.joins < 1)
    usage ();
  for (s = 0; s < o.n_sizes; s++)
    if (o.sizes[s] < 16 || o.sizes[s] > MAX_SIZE)
      {
        fprintf (stderr, "bench-bus: sizes must be 16 to %d bytes\n", MAX_SIZE);
        return 2;
      }
  signal (SIGPIPE, SIG_IGN);
  atexit (kill_stalled);

  if (join)
    {
      printf ("#bus\tclients\trep\tjoins\twall_ns\thello_median_ns\thello_p99_ns"
              "\tmatch_median_ns\tmatch_p99_ns\tdaemon_ns\tsystem_ns\n");
      for (k = 0; k < o.n_clients; k++)
        for (rep = 1; rep <= o.reps; rep++)
          failed |= join_run (&o, o.clients[k], rep);
      return failed;
    }
  if (rtt)
    printf ("#bus\tsize\trep\tcalls\tbad\twall_ns\tcalls_per_s\tmedian_ns\tp99_ns"
            "\tdaemon_ns\tsystem_ns\n");
  else
    printf ("#bus\tsize\tsubscribers\tmatching\trules\trep\tmessages\texpected\tdelivered"
            "\tlost\tdisorder\tmisrouted\twall_ns\tdeliveries_per_s\tlatency_median_ns"
            "\tlatency_p99_ns\tdaemon_ns\tsystem_ns\temitter_ns\n");
  for (s = 0; s < o.n_sizes; s++)
    for (k = 0; k < (rtt ? 1 : o.n_subscribers); k++)
      for (w = 0; w < (rtt ? 1 : o.n_matchings); w++)
        for (r = 0; r < (rtt ? 1 : o.n_rules); r++)
          for (rep = 1; rep <= o.reps; rep++)
            failed |= rtt ? rtt_run (&o, o.sizes[s], rep)
                          : signal_run (&o, o.sizes[s], o.subscribers[k],
                                        matching_of (o.matchings[w], o.subscribers[k]),
                                        o.rules[r], rep);
  return failed;
}
