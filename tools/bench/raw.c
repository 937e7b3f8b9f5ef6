/* bench-raw: one sender, N receivers on one machine: how fast does a
 * message reach all of them, and what does it cost?  (make bench)
 *
 * Transports:
 *   mcast-dgram      one send() to a SOCK_DGRAM multicast AF_UNIX group
 *   mcast-seqpacket  one send() from a member of a SOCK_SEQPACKET group
 *   udp-mcast        one send() to an IPv4 multicast group on loopback
 *   unix-sendmmsg    one sendmmsg() of N AF_UNIX datagrams, one per receiver
 *   socketpairs      N send()s, one per SOCK_SEQPACKET socketpair
 *
 * Every receiver is its own process, as the clients of a bus are: the
 * kernel then wakes N processes and switches between them, which is the
 * cost a bus pays (threads would share one address space and hide the
 * switches).  The sender is this process.
 *
 * Each message carries a sequence number; every receiver checks it, so a
 * lost, duplicated, reordered or short message is counted and reported,
 * never hidden.  The AF_UNIX transports promise delivery: a loss there
 * makes the exit status 1.  UDP may drop when a receive buffer is full; its
 * losses are reported in the "lost" column.
 *
 * Output, one tab-separated line per run (after a "#" header line):
 *   transport size receivers rep messages expected delivered lost disorder
 *   wall_ns deliveries_per_s sender_ns receivers_ns system_ns
 * where the *_ns columns are CPU time per delivered message: the sender's,
 * the receivers' (summed), and the whole machine's busy time from
 * /proc/stat (which also catches softirq work charged to kernel threads).
 * Progress goes to stderr.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The kernel's headers after the C library's: <linux/un.h> defines struct
 * sockaddr_un only if <sys/un.h> has not. */
#include <linux/un.h>

static const char bench_name[] = "bench-raw";
#include "common.h"

#define MAX_SIZE 4096
#define UDP_GROUP "239.255.77.1"
/* How long a receiver waits for more before asking whether the sender is
 * done; only matters when messages were lost. */
#define RECV_POLL_MS 200

struct fanout {
  int n;
  int *recv_fd;       /* n receiving sockets, one per receiver process */
  int *send_fd;       /* one sending socket, or n for socketpairs */
  int n_send;
  int *keep_fd;       /* sockets the sender holds but does not use */
  int n_keep;
  struct sockaddr_un *addr;   /* unix-sendmmsg: the receivers' addresses */
  struct mmsghdr *mmsg;
};

struct transport {
  const char *name;
  int reliable;       /* the kernel promises delivery: a loss is a failure */
  void (*setup) (struct fanout *f);
  void (*send_msg) (struct fanout *f, struct iovec *iov);
};

struct recv_result {
  long delivered;
  long lost;
  long disorder;      /* duplicates, reordering and wrong sizes */
  int64_t last_ns;    /* CLOCK_MONOTONIC of the last message */
  int64_t cpu_ns;
};

static int
unix_socket (int type)
{
  int fd = socket (AF_UNIX, type, 0);

  if (fd < 0)
    die ("socket(AF_UNIX)");
  return fd;
}

/* An abstract address unique to this process: "bench-raw-PID-TAG". */
static socklen_t
abstract_address (struct sockaddr_un *addr, const char *tag)
{
  int len;

  memset (addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  len = snprintf (addr->sun_path + 1, sizeof addr->sun_path - 1,
                  "bench-raw-%d-%s", getpid (), tag);
  return offsetof (struct sockaddr_un, sun_path) + 1 + len;
}

static void
group_mreq (struct unix_mreq *mreq, const char *tag)
{
  memset (mreq, 0, sizeof *mreq);
  mreq->address_len = abstract_address (&mreq->address, tag);
}

static void
add_keep (struct fanout *f, int fd)
{
  f->keep_fd[f->n_keep++] = fd;
}

static void
setup_mcast_dgram (struct fanout *f)
{
  struct unix_mreq mreq;
  int group = unix_socket (SOCK_DGRAM), i;

  group_mreq (&mreq, "dgram");
  if (setsockopt (group, SOL_UNIX, UNIX_CREATE_GROUP, &mreq, sizeof mreq) < 0)
    die ("UNIX_CREATE_GROUP");
  add_keep (f, group);
  for (i = 0; i < f->n; i++)
    {
      f->recv_fd[i] = unix_socket (SOCK_DGRAM);
      if (setsockopt (f->recv_fd[i], SOL_UNIX, UNIX_JOIN_GROUP, &mreq, sizeof mreq) < 0)
        die ("UNIX_JOIN_GROUP");
    }
  f->send_fd[0] = unix_socket (SOCK_DGRAM);
  if (connect (f->send_fd[0], (struct sockaddr *) &mreq.address, mreq.address_len) < 0)
    die ("connect(group)");
  f->n_send = 1;
}

/* The bus's shape: the listener is the group, the acceptor admits every
 * connection; receivers are N admitted clients, the sender one more. */
static void
setup_mcast_seqpacket (struct fanout *f)
{
  struct unix_mreq mreq;
  struct unix_accept_req admit = { .flags = 0 };
  int listener = unix_socket (SOCK_SEQPACKET), i;

  group_mreq (&mreq, "seqpacket");
  if (setsockopt (listener, SOL_UNIX, UNIX_CREATE_GROUP, &mreq, sizeof mreq) < 0
      || listen (listener, 16) < 0)
    die ("UNIX_CREATE_GROUP on SOCK_SEQPACKET");
  add_keep (f, listener);
  for (i = 0; i <= f->n; i++)
    {
      int client = unix_socket (SOCK_SEQPACKET), accepted;

      if (connect (client, (struct sockaddr *) &mreq.address, mreq.address_len) < 0)
        die ("connect(group)");
      accepted = accept (listener, NULL, NULL);
      if (accepted < 0)
        die ("accept");
      if (setsockopt (accepted, SOL_UNIX, UNIX_ACCEPT_GROUP, &admit, sizeof admit) < 0)
        die ("UNIX_ACCEPT_GROUP");
      add_keep (f, accepted);
      if (i < f->n)
        f->recv_fd[i] = client;
      else
        f->send_fd[0] = client;
    }
  f->n_send = 1;
}

/* Loopback has no multicast route by default: tools/bench/run adds
 * 224.0.0.0/4 on lo in the VM.  TTL 0 keeps the sender's copy on the
 * host: only the looped-back copy (IP_MULTICAST_LOOP) is delivered,
 * not a second one through lo's own transmit. */
static void
setup_udp_mcast (struct fanout *f)
{
  struct sockaddr_in addr = { .sin_family = AF_INET };
  struct ip_mreqn mreq = { .imr_ifindex = if_nametoindex ("lo") };
  socklen_t len = sizeof addr;
  int one = 1, zero = 0, i;

  inet_pton (AF_INET, UDP_GROUP, &mreq.imr_multiaddr);
  for (i = 0; i < f->n; i++)
    {
      int fd = socket (AF_INET, SOCK_DGRAM, 0);

      if (fd < 0 || setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
        die ("UDP socket");
      addr.sin_addr = mreq.imr_multiaddr;
      if (bind (fd, (struct sockaddr *) &addr, sizeof addr) < 0)
        die ("bind(UDP group)");
      if (i == 0 && getsockname (fd, (struct sockaddr *) &addr, &len) < 0)
        die ("getsockname");
      if (setsockopt (fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof mreq) < 0)
        die ("IP_ADD_MEMBERSHIP on lo");
      f->recv_fd[i] = fd;
    }
  f->send_fd[0] = socket (AF_INET, SOCK_DGRAM, 0);
  if (f->send_fd[0] < 0
      || setsockopt (f->send_fd[0], IPPROTO_IP, IP_MULTICAST_IF, &mreq, sizeof mreq) < 0
      || setsockopt (f->send_fd[0], IPPROTO_IP, IP_MULTICAST_TTL, &zero, sizeof zero) < 0
      || setsockopt (f->send_fd[0], IPPROTO_IP, IP_MULTICAST_LOOP, &one, sizeof one) < 0)
    die ("UDP sender");
  if (connect (f->send_fd[0], (struct sockaddr *) &addr, sizeof addr) < 0)
    die ("connect(UDP group): is there a multicast route on lo?");
  f->n_send = 1;
}

static void
setup_unix_sendmmsg (struct fanout *f)
{
  int i;

  for (i = 0; i < f->n; i++)
    {
      char tag[16];
      socklen_t len;

      snprintf (tag, sizeof tag, "r%d", i);
      len = abstract_address (&f->addr[i], tag);
      f->recv_fd[i] = unix_socket (SOCK_DGRAM);
      if (bind (f->recv_fd[i], (struct sockaddr *) &f->addr[i], len) < 0)
        die ("bind");
      f->mmsg[i].msg_hdr.msg_name = &f->addr[i];
      f->mmsg[i].msg_hdr.msg_namelen = len;
    }
  f->send_fd[0] = unix_socket (SOCK_DGRAM);
  f->n_send = 1;
}

static void
setup_socketpairs (struct fanout *f)
{
  int i, sv[2];

  for (i = 0; i < f->n; i++)
    {
      if (socketpair (AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0)
        die ("socketpair");
      f->send_fd[i] = sv[0];
      f->recv_fd[i] = sv[1];
    }
  f->n_send = f->n;
}

static void
send_once (struct fanout *f, struct iovec *iov)
{
  if (send (f->send_fd[0], iov->iov_base, iov->iov_len, 0) != (ssize_t) iov->iov_len)
    die ("send");
}

static void
send_each (struct fanout *f, struct iovec *iov)
{
  int i;

  for (i = 0; i < f->n_send; i++)
    if (send (f->send_fd[i], iov->iov_base, iov->iov_len, 0) != (ssize_t) iov->iov_len)
      die ("send(socketpair)");
}

static void
send_mmsg (struct fanout *f, struct iovec *iov)
{
  int i, sent = 0;

  for (i = 0; i < f->n; i++)
    {
      f->mmsg[i].msg_hdr.msg_iov = iov;
      f->mmsg[i].msg_hdr.msg_iovlen = 1;
    }
  while (sent < f->n)
    {
      int r = sendmmsg (f->send_fd[0], f->mmsg + sent, f->n - sent, 0);

      if (r < 0)
        die ("sendmmsg");
      sent += r;
    }
}

static const struct transport transports[] = {
  { "mcast-dgram", 1, setup_mcast_dgram, send_once },
  { "mcast-seqpacket", 1, setup_mcast_seqpacket, send_once },
  { "udp-mcast", 0, setup_udp_mcast, send_once },
  { "unix-sendmmsg", 1, setup_unix_sendmmsg, send_mmsg },
  { "socketpairs", 1, setup_socketpairs, send_each },
};
#define NR_TRANSPORTS (sizeof transports / sizeof transports[0])

static void
fanout_init (struct fanout *f, int n)
{
  memset (f, 0, sizeof *f);
  f->n = n;
  f->recv_fd = calloc (n, sizeof (int));
  f->send_fd = calloc (n, sizeof (int));
  f->keep_fd = calloc (n + 2, sizeof (int));
  f->addr = calloc (n, sizeof (struct sockaddr_un));
  f->mmsg = calloc (n, sizeof (struct mmsghdr));
  if (!f->recv_fd || !f->send_fd || !f->keep_fd || !f->addr || !f->mmsg)
    die ("calloc");
}

/* Close the fan-out's sockets, all but receiving socket @keep (-1: all). */
static void
fanout_close (struct fanout *f, int keep)
{
  int i;

  for (i = 0; i < f->n; i++)
    if (i != keep)
      close (f->recv_fd[i]);
  for (i = 0; i < f->n_send; i++)
    close (f->send_fd[i]);
  for (i = 0; i < f->n_keep; i++)
    close (f->keep_fd[i]);
}

static void
fanout_free (struct fanout *f)
{
  free (f->recv_fd);
  free (f->send_fd);
  free (f->keep_fd);
  free (f->addr);
  free (f->mmsg);
}

/* Has the sender closed the "done" pipe? */
static int
sender_done (int done_fd)
{
  char c;

  return read (done_fd, &c, 1) == 0;
}

/* A receiver process: take @messages messages of @size bytes from @fd. */
static void
receive (int fd, int done_fd, long messages, size_t size,
         struct recv_result *r)
{
  struct timeval poll_tv = { .tv_usec = RECV_POLL_MS * 1000 };
  char buf[MAX_SIZE + 1];
  uint64_t expected = 0, seq;
  int64_t cpu0 = clock_ns (CLOCK_PROCESS_CPUTIME_ID);

  memset (r, 0, sizeof *r);
  if (setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &poll_tv, sizeof poll_tv) < 0)
    die ("SO_RCVTIMEO");
  while (expected < (uint64_t) messages)
    {
      ssize_t n = recv (fd, buf, sizeof buf, 0);

      if (n < 0 && (errno == EAGAIN || errno == EINTR))
        {
          if (sender_done (done_fd))
            break;
          continue;
        }
      if (n < 0)
        die ("recv");
      if (n == 0)
        break;          /* a socketpair's sender is gone */
      r->last_ns = clock_ns (CLOCK_MONOTONIC);
      memcpy (&seq, buf, sizeof seq);
      if ((size_t) n != size || seq < expected)
        {
          r->disorder++;
          continue;
        }
      r->lost += seq - expected;
      r->delivered++;
      expected = seq + 1;
    }
  r->lost += messages - expected;
  r->cpu_ns = clock_ns (CLOCK_PROCESS_CPUTIME_ID) - cpu0;
}

/* One run: set up, fork the receivers, send, collect.  Returns 1 when a
 * transport that promises delivery lost or disordered a message. */
static int
run (const struct transport *t, size_t size, int n, int rep, long messages)
{
  int ready[2], done[2], results[2], i, failed;
  struct recv_result total = { 0 }, r;
  int64_t t0, sender_cpu, busy, wall;
  static char buf[MAX_SIZE];
  struct iovec iov = { .iov_base = buf, .iov_len = size };
  struct fanout f;
  uint64_t seq;
  char c;

  fanout_init (&f, n);
  t->setup (&f);
  if (pipe (ready) < 0 || pipe2 (done, O_NONBLOCK) < 0 || pipe (results) < 0)
    die ("pipe");
  for (i = 0; i < n; i++)
    {
      pid_t pid = fork ();

      if (pid < 0)
        die ("fork");
      if (pid == 0)
        {
          fanout_close (&f, i);
          close (ready[0]);
          close (done[1]);
          close (results[0]);
          if (write (ready[1], "r", 1) != 1)
            die ("write(ready)");
          receive (f.recv_fd[i], done[0], messages, size, &r);
          if (write (results[1], &r, sizeof r) != sizeof r)
            die ("write(results)");
          _exit (0);
        }
    }
  for (i = 0; i < n; i++)
    close (f.recv_fd[i]);
  close (ready[1]);
  close (done[0]);
  close (results[1]);
  for (i = 0; i < n; i++)
    if (read (ready[0], &c, 1) != 1)
      die ("a receiver did not start");

  busy = system_busy_ns ();
  t0 = clock_ns (CLOCK_MONOTONIC);
  sender_cpu = clock_ns (CLOCK_THREAD_CPUTIME_ID);
  for (seq = 0; seq < (uint64_t) messages; seq++)
    {
      memcpy (buf, &seq, sizeof seq);
      t->send_msg (&f, &iov);
    }
  sender_cpu = clock_ns (CLOCK_THREAD_CPUTIME_ID) - sender_cpu;
  close (done[1]);

  for (i = 0; i < n; i++)
    {
      if (read_full (results[0], &r, sizeof r) < 0)
        die ("a receiver died");
      total.delivered += r.delivered;
      total.lost += r.lost;
      total.disorder += r.disorder;
      total.cpu_ns += r.cpu_ns;
      if (r.last_ns > total.last_ns)
        total.last_ns = r.last_ns;
    }
  busy = system_busy_ns () - busy;
  while (wait (NULL) > 0)
    ;
  close (ready[0]);
  close (results[0]);
  fanout_close (&f, -1);
  fanout_free (&f);

  wall = total.last_ns > t0 ? total.last_ns - t0 : 1;
  printf ("%s\t%zu\t%d\t%d\t%ld\t%ld\t%ld\t%ld\t%ld\t%lld\t%.0f\t%.0f\t%.0f\t%.0f\n",
          t->name, size, n, rep, messages, messages * n, total.delivered,
          total.lost, total.disorder, (long long) wall,
          total.delivered * 1e9 / wall,
          total.delivered ? (double) sender_cpu / total.delivered : 0,
          total.delivered ? (double) total.cpu_ns / total.delivered : 0,
          total.delivered ? (double) busy / total.delivered : 0);
  fflush (stdout);
  fprintf (stderr, "bench-raw: %-15s %4zu B N=%-3d rep %d: %9.0f deliveries/s%s\n",
           t->name, size, n, rep, total.delivered * 1e9 / wall,
           total.lost || total.disorder ? " (LOST OR DISORDERED MESSAGES)" : "");
  failed = t->reliable && (total.lost || total.disorder);
  return failed;
}

/* Is @name in the comma-separated @list? */
static int
selected (const char *list, const char *name)
{
  size_t len = strlen (name);
  const char *p;

  for (p = list; (p = strstr (p, name)); p += len)
    if ((p == list || p[-1] == ',') && (p[len] == ',' || !p[len]))
      return 1;
  return 0;
}

static void
usage (void)
{
  fprintf (stderr,
           "usage: bench-raw [--transports NAME,...] [--sizes B,...] [--receivers N,...]\n"
           "                 [--deliveries D] [--min-messages M] [--reps R]\n");
  exit (2);
}

int
main (int argc, char **argv)
{
  long sizes[8] = { 64, 4096 }, receivers[16] = { 1, 4, 16, 64 };
  int n_sizes = 2, n_receivers = 4, reps = 5, failed = 0, matched = 0, i, s, k, rep;
  long deliveries = 200000, min_messages = 1000;
  const char *only = NULL;

  for (i = 1; i < argc; i++)
    {
      if (i + 1 >= argc)
        usage ();
      if (!strcmp (argv[i], "--transports"))
        only = argv[++i];
      else if (!strcmp (argv[i], "--sizes"))
        n_sizes = parse_list (argv[++i], sizes, 8);
      else if (!strcmp (argv[i], "--receivers"))
        n_receivers = parse_list (argv[++i], receivers, 16);
      else if (!strcmp (argv[i], "--deliveries"))
        deliveries = atol (argv[++i]);
      else if (!strcmp (argv[i], "--min-messages"))
        min_messages = atol (argv[++i]);
      else if (!strcmp (argv[i], "--reps"))
        reps = atoi (argv[++i]);
      else
        usage ();
    }
  if (only)
    {
      int names = 1;

      for (i = 0; only[i]; i++)
        names += only[i] == ',';
      for (i = 0; i < (int) NR_TRANSPORTS; i++)
        matched += selected (only, transports[i].name);
      if (matched != names)
        {
          fprintf (stderr, "bench-raw: unknown transport in \"%s\"\n", only);
          return 2;
        }
    }
  for (s = 0; s < n_sizes; s++)
    if (sizes[s] < (long) sizeof (uint64_t) || sizes[s] > MAX_SIZE)
      {
        fprintf (stderr, "bench-raw: sizes must be 8 to %d bytes\n", MAX_SIZE);
        return 2;
      }
  signal (SIGPIPE, SIG_IGN);

  printf ("#transport\tsize\treceivers\trep\tmessages\texpected\tdelivered\tlost\tdisorder"
          "\twall_ns\tdeliveries_per_s\tsender_ns\treceivers_ns\tsystem_ns\n");
  for (i = 0; i < (int) NR_TRANSPORTS; i++)
    {
      const struct transport *t = &transports[i];

      if (only && !selected (only, t->name))
        continue;
      for (s = 0; s < n_sizes; s++)
        for (k = 0; k < n_receivers; k++)
          for (rep = 1; rep <= reps; rep++)
            {
              long messages = deliveries / receivers[k];

              if (messages < min_messages)
                messages = min_messages;
              failed |= run (t, sizes[s], receivers[k], rep, messages);
            }
    }
  return failed;
}
