/* mcast-demo: one send reaches several members of a multicast AF_UNIX
 * group.  Run inside the VM (make demo): it creates a group, starts member
 * processes that join it, sends one message from a non-member, and has
 * every member report what it received.
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
#include <linux/un.h>

#define NR_MEMBERS 4

static void die (const char *what)
{
  fprintf (stderr, "mcast-demo: %s: %s\n", what, strerror (errno));
  exit (1);
}

static int members (int group)
{
  socklen_t len = sizeof (int);
  int n;

  if (getsockopt (group, SOL_UNIX, UNIX_GROUP_MEMBERS, &n, &len) < 0)
    die ("getsockopt(UNIX_GROUP_MEMBERS)");
  return n;
}

int main (void)
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
          return strcmp (buf, text) != 0;
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
