/* mcast-demo: what the multicast AF_UNIX kernel feature does, in the VM
 * (make demo).
 *
 * Part 1, SOCK_DGRAM: one send from a non-member reaches every member
 * process of a group.
 * Part 2, SOCK_SEQPACKET, the way a bus uses it: an acceptor ("the
 * daemon") admits connected clients into the group, names each with a
 * sender id and gives each a peer filter; a client's broadcast reaches the
 * others with the kernel-stamped id, and a message addressed to one client
 * is dropped by the other clients' filters.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* The kernel's headers after the C library's: <linux/un.h> defines struct
 * sockaddr_un only if <sys/un.h> has not. */
#include <linux/filter.h>
#include <linux/un.h>

#define NR_MEMBERS 4

static void
die (const char *what)
{
  fprintf (stderr, "mcast-demo: %s: %s\n", what, strerror (errno));
  exit (1);
}

static int
members (int group)
{
  socklen_t len = sizeof (int);
  int n;

  if (getsockopt (group, SOL_UNIX, UNIX_GROUP_MEMBERS, &n, &len) < 0)
    die ("getsockopt(UNIX_GROUP_MEMBERS)");
  return n;
}

static int
dgram_group_demo (void)
{
  static const char name[] = "dbus-mcast-demo";
  static const char text[] = "one send, every member";
  struct unix_mreq mreq = { .address.sun_family = AF_UNIX };
  int group, sender, i, ready[2], failed = 0;
  char c;

  memcpy (mreq.address.sun_path + 1, name, sizeof name - 1);
  mreq.address_len = offsetof (struct sockaddr_un, sun_path) + sizeof name;

  group = socket (AF_UNIX, SOCK_DGRAM, 0);
  if (group < 0 || setsockopt (group, SOL_UNIX, UNIX_CREATE_GROUP, &mreq, sizeof mreq) < 0)
    die ("UNIX_CREATE_GROUP");
  printf ("group @%s created\n", name);

  if (pipe (ready) < 0)
    die ("pipe");
  for (i = 0; i < NR_MEMBERS; i++)
    {
      pid_t pid = fork ();

      if (pid < 0)
        die ("fork");
      if (pid == 0)
        {
          char buf[64] = "";
          ssize_t n;
          int fd = socket (AF_UNIX, SOCK_DGRAM, 0);

          if (fd < 0 || setsockopt (fd, SOL_UNIX, UNIX_JOIN_GROUP, &mreq, sizeof mreq) < 0)
            die ("UNIX_JOIN_GROUP");
          if (write (ready[1], "j", 1) != 1)
            die ("write");
          n = recv (fd, buf, sizeof buf - 1, 0);
          if (n < 0)
            die ("recv");
          printf ("  member %d (pid %d) received %zd bytes: \"%s\"\n", i, getpid (), n, buf);
          exit (strcmp (buf, text) != 0);
        }
    }
  for (i = 0; i < NR_MEMBERS; i++)
    if (read (ready[0], &c, 1) != 1)
      die ("read");
  printf ("%d members joined (UNIX_GROUP_MEMBERS says %d)\n", NR_MEMBERS, members (group));

  printf ("sending once to the group from a non-member\n");
  fflush (stdout);
  sender = socket (AF_UNIX, SOCK_DGRAM, 0);
  if (sender < 0 || sendto (sender, text, sizeof text, 0,
                            (struct sockaddr *) &mreq.address, mreq.address_len) < 0)
    die ("sendto");

  for (i = 0; i < NR_MEMBERS; i++)
    {
      int status;

      if (wait (&status) < 0)
        die ("wait");
      failed |= !WIFEXITED (status) || WEXITSTATUS (status) != 0;
    }
  printf ("after the members exited, UNIX_GROUP_MEMBERS says %d\n", members (group));
  printf (failed ? "FAILED: a member did not receive the message\n"
                 : "every member received the one send\n");
  return failed;
}

/* A client's peer filter: deliver broadcasts (first byte 0) and messages
 * whose first byte is this client's id; drop the rest. */
static void
set_peer_filter (int accepted, unsigned char id)
{
  struct sock_filter insns[] = {
    BPF_STMT (BPF_LD | BPF_B | BPF_ABS, 0),
    BPF_JUMP (BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 0),
    BPF_JUMP (BPF_JMP | BPF_JEQ | BPF_K, id, 1, 0),
    BPF_STMT (BPF_RET | BPF_K, 0),
    BPF_STMT (BPF_RET | BPF_K, 0xffff),
  };
  struct sock_fprog prog = { .len = 5, .filter = insns };

  if (setsockopt (accepted, SOL_UNIX, UNIX_PEER_FILTER, &prog, sizeof prog) < 0)
    die ("UNIX_PEER_FILTER");
}

/* Print what arrives on @fd within a short time, with its sender id. */
static int
report (int fd, const char *who)
{
  char buf[64], cbuf[CMSG_SPACE (sizeof (__u64))];
  int n = 0;

  for (;;)
    {
      struct iovec iov = { .iov_base = buf, .iov_len = sizeof buf };
      struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
                            .msg_control = cbuf, .msg_controllen = sizeof cbuf };
      struct cmsghdr *cmsg;
      __u64 id = 0;

      if (recvmsg (fd, &msg, MSG_DONTWAIT) < 0)
        break;
      for (cmsg = CMSG_FIRSTHDR (&msg); cmsg; cmsg = CMSG_NXTHDR (&msg, cmsg))
        if (cmsg->cmsg_level == SOL_UNIX && cmsg->cmsg_type == SCM_UNIX_SENDER_ID)
          memcpy (&id, CMSG_DATA (cmsg), sizeof id);
      printf ("  %s received \"%s\" from sender id %llu\n", who, buf + 1,
              (unsigned long long) id);
      n++;
    }
  if (!n)
    printf ("  %s received nothing\n", who);
  return n;
}

static int
seqpacket_bus_demo (void)
{
  static const char name[] = "dbus-mcast-demo-bus";
  struct unix_mreq mreq = { .address.sun_family = AF_UNIX };
  int listener, client[3], accepted[3], i, one = 1, got[3];
  char broadcast[64] = "\0broadcast from client 1";
  char unicast[64] = "\3for client 3 only";

  memcpy (mreq.address.sun_path + 1, name, sizeof name - 1);
  mreq.address_len = offsetof (struct sockaddr_un, sun_path) + sizeof name;

  listener = socket (AF_UNIX, SOCK_SEQPACKET, 0);
  if (listener < 0 || setsockopt (listener, SOL_UNIX, UNIX_CREATE_GROUP, &mreq, sizeof mreq) < 0
      || listen (listener, 3) < 0)
    die ("UNIX_CREATE_GROUP on SOCK_SEQPACKET");
  printf ("\nSOCK_SEQPACKET group @%s: the acceptor admits clients\n", name);

  for (i = 0; i < 3; i++)
    {
      struct unix_accept_req admit = { .flags = 0 };
      __u64 id = i + 1;

      client[i] = socket (AF_UNIX, SOCK_SEQPACKET, 0);
      if (client[i] < 0 || connect (client[i], (struct sockaddr *) &mreq.address,
                                    mreq.address_len) < 0)
        die ("connect");
      accepted[i] = accept (listener, NULL, NULL);
      if (accepted[i] < 0)
        die ("accept");
      if (setsockopt (accepted[i], SOL_UNIX, UNIX_PEER_ID, &id, sizeof id) < 0)
        die ("UNIX_PEER_ID");
      set_peer_filter (accepted[i], i + 1);
      if (setsockopt (accepted[i], SOL_UNIX, UNIX_ACCEPT_GROUP, &admit, sizeof admit) < 0)
        die ("UNIX_ACCEPT_GROUP");
      if (setsockopt (client[i], SOL_UNIX, UNIX_PASSID, &one, sizeof one) < 0)
        die ("UNIX_PASSID");
    }
  printf ("3 clients admitted with sender ids 1-3 and peer filters "
          "(UNIX_GROUP_MEMBERS says %d)\n", members (listener));

  printf ("client 1 sends a broadcast and a message addressed to client 3:\n");
  if (send (client[0], broadcast, sizeof broadcast, 0) < 0
      || send (client[0], unicast, sizeof unicast, 0) < 0)
    die ("send");
  for (i = 0; i < 3; i++)
    {
      char who[16];

      snprintf (who, sizeof who, "client %d", i + 1);
      got[i] = report (client[i], who);
    }

  for (i = 0; i < 3; i++)
    {
      close (client[i]);
      close (accepted[i]);
    }
  close (listener);
  /* Client 1 does not hear itself, client 2 only the broadcast, client 3
   * both: its filter passes its own address. */
  return !(got[0] == 0 && got[1] == 1 && got[2] == 2);
}

int
main (void)
{
  int failed = dgram_group_demo ();

  if (seqpacket_bus_demo ())
    {
      printf ("FAILED: the SOCK_SEQPACKET group did not deliver as expected\n");
      failed = 1;
    }
  else
    {
      printf ("the group delivered each message only where the filters allow\n");
    }
  return failed;
}
