/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* mcast-members.c  The members of the kernel multicast group, and keeping
 *                  every kernel filter in step with names and match rules
 *
 * See mcast-members.h for what this module is for.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "mcast-members.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <dbus/dbus-hash.h>
#include <dbus/dbus-list.h>
#include <dbus/dbus-mcast-member.h>
#include <dbus/dbus-mcast-uapi.h>
#include <dbus/dbus-match-rule.h>
#include "activation.h"
#include "connection.h"
#include "mcast-filter.h"
#include "mcast-observer.h"
#include "mcast-routing.h"
#include "mcast-spill.h"
#include "services.h"
#include "utils.h"

/* What the daemon knows about one connection, in a connection data slot.
 * Classic connections have one too as soon as they add a match rule: their
 * rules decide which broadcasts the daemon's own filters must pass. */
typedef struct
{
  DBusConnection *connection;  /**< not referenced: lives as long as it */
  DBusList *rules;             /**< DBusMatchRule *, in AddMatch order */
  dbus_bool_t member;          /**< admitted into the group */
  dbus_bool_t monitor;         /**< BecomeMonitor succeeded */
  /** A monitor with match rules: the daemon copies to it what they
   * match, as to a classic monitor, and its peer filter lets nothing
   * from the group through (a filter cannot resolve the names in a
   * monitor's destination= keys the way the daemon does) */
  dbus_bool_t selective;
  /** member: the well-known names it owned at the last flush, the keys
   * of BusMcastMembers.owners */
  DBusList *names;
  dbus_bool_t stale;           /**< member: its peer filter must be compiled again */
  dbus_bool_t recompiled;      /**< member: during a flush, its peer filter was
                                    compiled again: tell it the owners */
  dbus_bool_t staged;          /**< member: during a flush, programs of it
                                    wait for the commit */
  BusMcastProgram peer_filter; /**< member: the program installed */
  /** member: its table of owners as the Owners signals it was sent left
   * it (_dbus_mcast_owners_record(); tell_owners()) */
  DBusHashTable *told;
} BusMcastConnection;

/* The last two times a well-known name went into or out of members'
 * hands, as commit counts (the commit that installed the change) */
typedef struct
{
  dbus_uint32_t last;          /**< the last change */
  dbus_uint32_t previous;      /**< the one before, if moved_twice */
  dbus_bool_t moved_twice;
  dbus_bool_t owned_before;    /**< whether a member owned it before last */
  /** If not: the unique name of who did ("" for nobody), or NULL if
   * unknown (no memory) */
  char *other_before;
} Move;

/* How many commits the daemon keeps the moves of names for: a group
 * copy read later than that is taken to have been sent after them */
#define MOVES_KEPT_COMMITS 4096

struct BusMcastMembers
{
  BusContext *context;
  DBusList *members;           /**< BusMcastConnection *, admitted ones */
  DBusList *classic;           /**< BusMcastConnection *, classic ones with rules */
  dbus_uint32_t compilations;  /**< members' peer filters compiled */
  dbus_uint32_t group_holds;   /**< transactions that held the group */
  int n_classic_monitors;      /**< monitors the daemon serves, from its
                                    own member of the group */
  dbus_uint32_t commits;       /**< UNIX_GROUP_COMMITs made: the group's count */
  dbus_bool_t settling;        /**< a well-known name is changing owner:
                                    the group is held until the flush
                                    (settle_observer()) */
  DBusHashTable *owned;        /**< the well-known names members owned at
                                    the last commit (name -> name) */
  /** The well-known names members owned at the last flush: name ->
   * BusMcastConnection * (whose names list the key) */
  DBusHashTable *owners;
  /** Well-known names whose owner changed since the last flush, to look
   * up at the next (name -> name) */
  DBusHashTable *touched;
  /** Well-known names that went into or out of members' hands since the
   * last commit, for note_moves() (name -> name) */
  DBusHashTable *unnoted;
  /** touched missed a change (no memory): the next flush finds every
   * member's names again (rescan_names()) */
  dbus_bool_t rescan;
  /** unnoted is incomplete: the next commit compares every name
   * (note_moves()) */
  dbus_bool_t renote;
  DBusHashTable *moves;        /**< name -> Move */
  /** name -> the unique name of the last owner it had that is not a
   * member ("" for nobody), for the well-known names that changed owner
   * since the last commit: the old owner of their last NameOwnerChanged
   * whose old owner was not a member */
  DBusHashTable *last_others;
  dbus_bool_t dirty;           /**< some filter may be out of date */
  dbus_bool_t daemon_stale;    /**< daemon_program must be compiled again */
  BusMcastProgram daemon_program; /**< the copy filter of the whole group */
  dbus_bool_t daemon_staged;   /**< during a flush: daemon_program waits
                                    for the commit */
};

static dbus_int32_t connection_slot = -1;

static dbus_bool_t
program_equal (const BusMcastProgram *a,
               const BusMcastProgram *b)
{
  return a->len == b->len && a->insns != NULL && b->insns != NULL &&
         memcmp (a->insns, b->insns, a->len * sizeof (struct sock_filter)) == 0;
}

/* Replace @installed with a copy of @program, after the kernel took it. */
static dbus_bool_t
program_copy (BusMcastProgram       *installed,
              const BusMcastProgram *program)
{
  struct sock_filter *insns;

  insns = dbus_new (struct sock_filter, program->len);
  if (insns == NULL)
    return FALSE;

  memcpy (insns, program->insns, program->len * sizeof (struct sock_filter));
  bus_mcast_program_clear (installed);
  installed->insns = insns;
  installed->len = program->len;
  installed->precision = program->precision;
  return TRUE;
}

static void
mcast_connection_free (void *data)
{
  BusMcastConnection *mc = data;

  _dbus_list_clear_full (&mc->rules, (DBusFreeFunction) _dbus_match_rule_unref);
  _dbus_list_clear (&mc->names);
  bus_mcast_program_clear (&mc->peer_filter);
  if (mc->told != NULL)
    _dbus_hash_table_unref (mc->told);
  dbus_free (mc);
}

static BusMcastConnection *
mcast_connection_get (DBusConnection *connection)
{
  if (connection_slot < 0)
    return NULL;

  return dbus_connection_get_data (connection, connection_slot);
}

static BusMcastConnection *
mcast_connection_ensure (DBusConnection *connection)
{
  BusMcastConnection *mc;

  mc = mcast_connection_get (connection);
  if (mc != NULL)
    return mc;

  mc = dbus_new0 (BusMcastConnection, 1);
  if (mc == NULL)
    return NULL;

  mc->connection = connection;
  if (!dbus_connection_set_data (connection, connection_slot, mc,
                                 mcast_connection_free))
    {
      dbus_free (mc);
      return NULL;
    }

  return mc;
}

/* @mc's rules, or whether it is a monitor, changed: its peer filter if it
 * is a member, the daemon's program if the daemon serves it */
static void
mark_stale (BusMcastMembers    *members,
            BusMcastConnection *mc)
{
  if (mc->member)
    mc->stale = TRUE;
  if (!mc->member || mc->selective)
    members->daemon_stale = TRUE;
  members->dirty = TRUE;
}

static void
move_free (void *data)
{
  Move *move = data;

  /* The hash table frees the NULL value of an entry just created */
  if (move == NULL)
    return;

  dbus_free (move->other_before);
  dbus_free (move);
}

BusMcastMembers *
bus_mcast_members_new (BusContext *context)
{
  BusMcastMembers *members;

  if (!dbus_connection_allocate_data_slot (&connection_slot))
    return NULL;

  members = dbus_new0 (BusMcastMembers, 1);
  if (members == NULL)
    {
      dbus_connection_free_data_slot (&connection_slot);
      return NULL;
    }

  members->context = context;
  members->owned = _dbus_hash_table_new (DBUS_HASH_STRING, dbus_free, NULL);
  members->moves = _dbus_hash_table_new (DBUS_HASH_STRING, dbus_free, move_free);
  members->last_others = _dbus_hash_table_new (DBUS_HASH_STRING, dbus_free, dbus_free);
  members->owners = _dbus_hash_table_new (DBUS_HASH_STRING, dbus_free, NULL);
  members->touched = _dbus_hash_table_new (DBUS_HASH_STRING, dbus_free, NULL);
  members->unnoted = _dbus_hash_table_new (DBUS_HASH_STRING, dbus_free, NULL);
  if (members->owned == NULL || members->moves == NULL ||
      members->last_others == NULL || members->owners == NULL ||
      members->touched == NULL || members->unnoted == NULL)
    {
      bus_mcast_members_free (members);
      return NULL;
    }

  return members;
}

void
bus_mcast_members_free (BusMcastMembers *members)
{
  if (members == NULL)
    return;

  /* The connections own their BusMcastConnection */
  _dbus_list_clear (&members->members);
  _dbus_list_clear (&members->classic);
  bus_mcast_program_clear (&members->daemon_program);
  if (members->owned != NULL)
    _dbus_hash_table_unref (members->owned);
  if (members->moves != NULL)
    _dbus_hash_table_unref (members->moves);
  if (members->last_others != NULL)
    _dbus_hash_table_unref (members->last_others);
  if (members->owners != NULL)
    _dbus_hash_table_unref (members->owners);
  if (members->touched != NULL)
    _dbus_hash_table_unref (members->touched);
  if (members->unnoted != NULL)
    _dbus_hash_table_unref (members->unnoted);
  dbus_free (members);
  dbus_connection_free_data_slot (&connection_slot);
}

dbus_bool_t
bus_mcast_members_is_member (DBusConnection *connection)
{
  BusMcastConnection *mc = mcast_connection_get (connection);

  return mc != NULL && mc->member;
}

/* Whether the kernel delivers group messages to @connection (then the
 * daemon must not send them again) */
dbus_bool_t
bus_mcast_members_gets_group_traffic (DBusConnection *connection)
{
  BusMcastConnection *mc = mcast_connection_get (connection);

  return mc != NULL && mc->member && !mc->selective;
}

int
bus_mcast_members_get_n_members (BusMcastMembers *members)
{
  return _dbus_list_get_length (&members->members);
}

dbus_uint32_t
bus_mcast_members_get_compilations (BusMcastMembers *members)
{
  return members->compilations;
}

/* How closely @connection's peer filter follows its match rules, as
 * GetConnectionStats reports it; NULL if it is not a member */
const char *
bus_mcast_members_get_precision (DBusConnection *connection)
{
  BusMcastConnection *mc = mcast_connection_get (connection);

  if (mc == NULL || !mc->member)
    return NULL;

  switch (mc->peer_filter.precision)
    {
    case BUS_MCAST_PRECISION_EXACT:
      return "exact";
    case BUS_MCAST_PRECISION_NO_ARGS:
      return "no-args";
    case BUS_MCAST_PRECISION_SENDERS:
      return "senders";
    case BUS_MCAST_PRECISION_SIGNALS:
    default:
      return "signals";
    }
}

/* Whether @rule's sender= key is a well-known name other than the bus
 * driver's, which only the name's owner may match */
static dbus_bool_t
has_owned_sender (const DBusMatchRule *rule)
{
  return rule->sender != NULL && rule->sender[0] != ':' &&
         strcmp (rule->sender, DBUS_SERVICE_DBUS) != 0;
}

DBusConnection *
bus_mcast_owner_of (BusRegistry *registry,
                    const char  *name)
{
  BusService *service;
  DBusString str;

  _dbus_string_init_const (&str, name);
  service = bus_registry_lookup (registry, &str);
  return service != NULL ? bus_service_get_primary_owners_connection (service) : NULL;
}

/* The unique name owning @rule's well-known sender name, or NULL. */
static const char *
rule_sender_owner (BusRegistry         *registry,
                   const DBusMatchRule *rule)
{
  DBusConnection *owner;

  if (rule->sender == NULL || rule->sender[0] == ':')
    return NULL;

  /* The bus driver owns its name without being a connection */
  if (strcmp (rule->sender, DBUS_SERVICE_DBUS) == 0)
    return DBUS_SERVICE_DBUS;

  owner = bus_mcast_owner_of (registry, rule->sender);
  return owner != NULL ? bus_connection_get_name (owner) : NULL;
}

static dbus_bool_t
add_rules (BusMcastFilter     *filter,
           BusRegistry        *registry,
           BusMcastConnection *mc)
{
  DBusList *link;

  for (link = _dbus_list_get_first_link (&mc->rules);
       link != NULL;
       link = _dbus_list_get_next_link (&mc->rules, link))
    {
      DBusMatchRule *rule = link->data;

      if (!bus_mcast_filter_add_rule (filter, rule,
                                      rule_sender_owner (registry, rule)))
        return FALSE;
    }

  return TRUE;
}

/* Empties @table (libdbus does not export _dbus_hash_table_remove_all()) */
static void
remove_all (DBusHashTable *table)
{
  DBusHashIter iter;

  _dbus_hash_iter_init (table, &iter);
  while (_dbus_hash_iter_next (&iter))
    _dbus_hash_iter_remove_entry (&iter);
}

/* Adds @name to the set @set (name -> name).  FALSE if no memory. */
static dbus_bool_t
set_add (DBusHashTable *set,
         const char    *name)
{
  char *key;

  if (_dbus_hash_table_lookup_string (set, name) != NULL)
    return TRUE;

  key = _dbus_strdup (name);
  if (key == NULL || !_dbus_hash_table_insert_string (set, key, key))
    {
      dbus_free (key);
      return FALSE;
    }

  return TRUE;
}

/* The owner of the well-known name @name changed, or may have: the next
 * flush looks it up.  Without memory it looks up every name. */
static void
touch_name (BusMcastMembers *members,
            const char      *name)
{
  if (!set_add (members->touched, name))
    members->rescan = TRUE;
  members->dirty = TRUE;
}

/* The member that owns the well-known name @name now, or NULL */
static BusMcastConnection *
member_owning (BusMcastMembers *members,
               const char      *name)
{
  DBusConnection *connection;
  BusMcastConnection *owner;

  connection = bus_mcast_owner_of (bus_context_get_registry (members->context),
                                   name);
  if (connection == NULL)
    return NULL;

  owner = mcast_connection_get (connection);
  return owner != NULL && owner->member ? owner : NULL;
}

/* Moves @name, in members->owners, to the member that owns it now, and
 * marks the programs of both for compiling.  FALSE if no memory; nothing
 * changed then. */
static dbus_bool_t
follow_name (BusMcastMembers *members,
             const char      *name)
{
  BusMcastConnection *old = _dbus_hash_table_lookup_string (members->owners, name);
  BusMcastConnection *now = member_owning (members, name);
  DBusList *link = NULL;
  DBusHashIter iter;
  char *key = NULL;

  if (old == now)
    return TRUE;

  if (!set_add (members->unnoted, name))
    return FALSE;

  if (now != NULL)
    {
      link = _dbus_list_alloc_link (NULL);
      if (link == NULL)
        return FALSE;
    }

  if (old == NULL)
    {
      key = _dbus_strdup (name);
      if (key == NULL ||
          !_dbus_hash_table_insert_string (members->owners, key, now))
        {
          dbus_free (key);
          _dbus_list_free_link (link);
          return FALSE;
        }
    }
  else
    {
      if (!_dbus_hash_iter_lookup (members->owners, (char *) name, FALSE, &iter))
        _dbus_assert_not_reached ("an owned name is in members->owners");
      key = (char *) _dbus_hash_iter_get_string_key (&iter);
      _dbus_list_remove (&old->names, key);
      old->stale = TRUE;
      if (now == NULL)
        _dbus_hash_iter_remove_entry (&iter);
      else
        _dbus_hash_iter_set_value (&iter, now);
    }

  if (now != NULL)
    {
      link->data = key;
      _dbus_list_append_link (&now->names, link);
      now->stale = TRUE;
    }

  return TRUE;
}

/* Takes @mc's names out of members->owners (it is no longer a member):
 * they left members' hands, and the next flush looks up who owns them
 * now */
static void
drop_names (BusMcastMembers    *members,
            BusMcastConnection *mc)
{
  char *name;

  while ((name = _dbus_list_pop_first (&mc->names)) != NULL)
    {
      if (!set_add (members->unnoted, name))
        members->renote = TRUE;
      touch_name (members, name);
      _dbus_hash_table_remove_string (members->owners, name);
    }
}

/* Finds every member's well-known names again, when a change went
 * unrecorded; every member's program is compiled again.  FALSE if no
 * memory. */
static dbus_bool_t
rescan_names (BusMcastMembers *members)
{
  DBusList *link;
  char **names;
  dbus_bool_t ok = TRUE;
  int i;

  if (!bus_registry_list_services (bus_context_get_registry (members->context),
                                   &names, NULL))
    return FALSE;

  for (link = _dbus_list_get_first_link (&members->members);
       link != NULL;
       link = _dbus_list_get_next_link (&members->members, link))
    {
      BusMcastConnection *mc = link->data;

      _dbus_list_clear (&mc->names);
      mc->stale = TRUE;
    }
  remove_all (members->owners);
  remove_all (members->touched);

  for (i = 0; names[i] != NULL && ok; i++)
    ok = names[i][0] == ':' || follow_name (members, names[i]);
  dbus_free_string_array (names);
  if (!ok)
    return FALSE;

  members->rescan = FALSE;
  members->renote = TRUE;
  return TRUE;
}

/* Calls @function for each name in the set @set and takes the name out
 * once it returned TRUE.  FALSE (no memory) at the first that fails; the
 * names not done stay in @set. */
static dbus_bool_t
take_each (BusMcastMembers *members,
           DBusHashTable   *set,
           dbus_bool_t    (*function) (BusMcastMembers *members,
                                       const char      *name))
{
  DBusHashIter iter;

  _dbus_hash_iter_init (set, &iter);
  while (_dbus_hash_iter_next (&iter))
    {
      if (!function (members, _dbus_hash_iter_get_string_key (&iter)))
        return FALSE;
      _dbus_hash_iter_remove_entry (&iter);
    }

  return TRUE;
}

/* Brings every member's names (mc->names) up to date with the names
 * that changed owner since the last flush.  FALSE if no memory; the
 * names not done yet are done at the next flush. */
static dbus_bool_t
update_names (BusMcastMembers *members)
{
  if (members->rescan)
    return rescan_names (members);

  return take_each (members, members->touched, follow_name);
}

/* The daemon's program: what classic clients' rules ask for (monitors it
 * serves get the group from its own member, mcast-observer.h), and what
 * no member's filter claimed (a message addressed to a member's name the
 * kernel delivers to it directly).  FALSE on OOM. */
static dbus_bool_t
fill_daemon_filter (BusMcastMembers *members,
                    BusMcastFilter  *filter)
{
  BusRegistry *registry = bus_context_get_registry (members->context);
  DBusList *link;

  for (link = _dbus_list_get_first_link (&members->classic);
       link != NULL;
       link = _dbus_list_get_next_link (&members->classic, link))
    {
      if (!add_rules (filter, registry, link->data))
        return FALSE;
    }

  return TRUE;
}

/* A member's program: its own names and its own rules.  FALSE on OOM. */
static dbus_bool_t
fill_peer_filter (BusMcastMembers    *members,
                  BusMcastConnection *mc,
                  BusMcastFilter     *filter)
{
  BusRegistry *registry = bus_context_get_registry (members->context);
  DBusList *link;

  if (mc->monitor && !mc->selective)
    bus_mcast_filter_accept_all (filter);

  if (!bus_mcast_filter_add_name (filter,
                                  bus_connection_get_name (mc->connection)))
    return FALSE;

  for (link = _dbus_list_get_first_link (&mc->names);
       link != NULL;
       link = _dbus_list_get_next_link (&mc->names, link))
    {
      if (!bus_mcast_filter_add_name (filter, link->data))
        return FALSE;
    }

  return add_rules (filter, registry, mc);
}

/* Compiles the program of the daemon (@mc NULL) or of member @mc. */
static dbus_bool_t
compile_filter (BusMcastMembers    *members,
                BusMcastConnection *mc,
                BusMcastProgram    *program,
                DBusError          *error)
{
  BusMcastFilter *filter;
  dbus_bool_t filled;
  dbus_bool_t ok = FALSE;

  filter = bus_mcast_filter_new (mc == NULL ? BUS_MCAST_FILTER_DAEMON
                                            : BUS_MCAST_FILTER_MEMBER);
  if (filter == NULL)
    {
      BUS_SET_OOM (error);
      return FALSE;
    }

  if (mc == NULL)
    filled = fill_daemon_filter (members, filter);
  else
    filled = fill_peer_filter (members, mc, filter);

  if (filled)
    ok = bus_mcast_filter_compile (filter, program, error);
  else
    BUS_SET_OOM (error);

  bus_mcast_filter_free (filter);
  return ok;
}

/* Stages @program as @connection's filter @option
 * (UNIX_PEER_FILTER_STAGE or UNIX_GROUP_COPY_FILTER_STAGE) unless it is
 * the one @installed, which it then becomes; the flush installs every staged
 * program at once (commit_staged()).  Sets *@staged if it staged it. */
static dbus_bool_t
stage_program (DBusConnection        *connection,
               int                    option,
               const BusMcastProgram *program,
               BusMcastProgram       *installed,
               dbus_bool_t           *staged,
               DBusError             *error)
{
  struct sock_fprog fprog;
  int fd;

  if (program_equal (program, installed))
    return TRUE;

  if (!dbus_connection_get_socket (connection, &fd))
    {
      dbus_set_error (error, DBUS_ERROR_DISCONNECTED, "Connection has no socket");
      return FALSE;
    }

  /* Zeroed: the kernel copies the padding after len too */
  _DBUS_ZERO (fprog);
  fprog.len = program->len;
  fprog.filter = program->insns;
  if (setsockopt (fd, SOL_UNIX, option, &fprog, sizeof (fprog)) < 0)
    {
      dbus_set_error (error, _dbus_error_from_errno (errno),
                      "Could not install a kernel filter for %s: %s",
                      bus_connection_get_name (connection),
                      _dbus_strerror (errno));
      return FALSE;
    }

  *staged = TRUE;
  if (!program_copy (installed, program))
    {
      /* The kernel has the program; forgetting our copy only costs a
       * redundant replacement next time. */
      bus_mcast_program_clear (installed);
    }

  return TRUE;
}

/* The owners now of the well-known names that @mc's rules' sender= keys
 * name, into @owners: name -> unique name, "" for none, neither copied.
 * FALSE on OOM. */
static dbus_bool_t
collect_sender_owners (BusRegistry        *registry,
                       BusMcastConnection *mc,
                       DBusHashTable      *owners)
{
  DBusList *link;

  for (link = _dbus_list_get_first_link (&mc->rules);
       link != NULL;
       link = _dbus_list_get_next_link (&mc->rules, link))
    {
      DBusMatchRule *rule = link->data;
      const char *owner;

      if (!has_owned_sender (rule))
        continue;

      owner = rule_sender_owner (registry, rule);
      if (!_dbus_hash_table_insert_string (owners, rule->sender,
                                           (char *) (owner != NULL ? owner : "")))
        return FALSE;
    }

  return TRUE;
}

/* Appends (@name, @owner) to the array of an Owners signal */
static dbus_bool_t
append_owner (DBusMessageIter *array,
              const char      *name,
              const char      *owner)
{
  DBusMessageIter entry;

  return dbus_message_iter_open_container (array, DBUS_TYPE_STRUCT, NULL,
                                           &entry) &&
         dbus_message_iter_append_basic (&entry, DBUS_TYPE_STRING, &name) &&
         dbus_message_iter_append_basic (&entry, DBUS_TYPE_STRING, &owner) &&
         dbus_message_iter_close_container (array, &entry);
}

/* Appends to @array the owners in @now that member @mc was not told yet,
 * and "" for the names it was told of that no rule names any more;
 * @mc->told becomes the member's table as these entries leave it.
 * *@changed is set if anything was appended.
 * FALSE on OOM. */
static dbus_bool_t
append_changed_owners (BusMcastConnection *mc,
                       DBusHashTable      *now,
                       DBusMessageIter    *array,
                       dbus_bool_t        *changed)
{
  DBusHashIter iter;

  _dbus_hash_iter_init (now, &iter);
  while (_dbus_hash_iter_next (&iter))
    {
      const char *name = _dbus_hash_iter_get_string_key (&iter);
      const char *owner = _dbus_hash_iter_get_value (&iter);
      const char *told = _dbus_hash_table_lookup_string (mc->told, name);

      /* No entry: the member takes the name to have no owner */
      if (told == NULL ? *owner == '\0' : strcmp (told, owner) == 0)
        continue;

      if (!_dbus_mcast_owners_record (mc->told, name, owner) ||
          !append_owner (array, name, owner))
        return FALSE;
      *changed = TRUE;
    }

  _dbus_hash_iter_init (mc->told, &iter);
  while (_dbus_hash_iter_next (&iter))
    {
      const char *name = _dbus_hash_iter_get_string_key (&iter);

      if (_dbus_hash_table_lookup_string (now, name) != NULL)
        continue;

      if (!append_owner (array, name, ""))
        return FALSE;
      *changed = TRUE;
      _dbus_hash_iter_remove_entry (&iter);
    }

  return TRUE;
}

/* Tells member @mc, with the Owners signal (dbus-mcast-member.h), who
 * owns the well-known names its rules' sender= keys name, where that
 * changed since it was last told.  Its libdbus cannot resolve them
 * itself, and a peer filter loosened to fit (BUS_MCAST_PRECISION_SIGNALS)
 * no longer compares SENDER: without the owners, any member could sign a
 * broadcast that matches a rule for a well-known service.  The signal
 * goes behind the group copies diverted from the member so far, which
 * were sent before the change.  FALSE on OOM. */
static dbus_bool_t
tell_owners (BusMcastMembers    *members,
             BusMcastConnection *mc,
             DBusError          *error)
{
  BusRegistry *registry = bus_context_get_registry (members->context);
  DBusMessageIter args, array = DBUS_MESSAGE_ITER_INIT_CLOSED;
  DBusHashTable *now = NULL;
  DBusMessage *signal = NULL;
  dbus_bool_t changed = FALSE;
  dbus_bool_t ok;
  DBusList *link;

  if (mc->told == NULL)
    {
      for (link = _dbus_list_get_first_link (&mc->rules);
           link != NULL && !has_owned_sender (link->data);
           link = _dbus_list_get_next_link (&mc->rules, link))
        ;
      /* Nothing to tell, nothing told: most members */
      if (link == NULL)
        return TRUE;

      mc->told = _dbus_hash_table_new (DBUS_HASH_STRING, dbus_free, dbus_free);
      if (mc->told == NULL)
        goto oom;
    }

  now = _dbus_hash_table_new (DBUS_HASH_STRING, NULL, NULL);
  signal = _dbus_mcast_daemon_signal_new (DBUS_MCAST_OWNERS);
  if (now == NULL || signal == NULL)
    goto oom;

  dbus_message_iter_init_append (signal, &args);
  ok = collect_sender_owners (registry, mc, now) &&
       dbus_message_set_destination (signal,
                                     bus_connection_get_name (mc->connection)) &&
       dbus_message_iter_open_container (&args, DBUS_TYPE_ARRAY, "(ss)",
                                         &array) &&
       append_changed_owners (mc, now, &array, &changed) &&
       dbus_message_iter_close_container (&args, &array);
  if (!ok)
    {
      dbus_message_iter_abandon_container_if_open (&args, &array);
      goto oom;
    }

  if (changed)
    bus_mcast_spill_send_behind (bus_context_get_mcast_spill (members->context),
                                 mc->connection, signal);

  dbus_message_unref (signal);
  _dbus_hash_table_unref (now);
  return TRUE;

 oom:
  if (signal != NULL)
    dbus_message_unref (signal);
  if (now != NULL)
    _dbus_hash_table_unref (now);
  BUS_SET_OOM (error);
  return FALSE;
}

/* Bring @mc's peer filter up to date; it is staged in the kernel when
 * this returns TRUE.  It is compiled again only when it is stale: one
 * member's AddMatch must not cost a compilation for every member. */
static dbus_bool_t
update_member (BusMcastMembers    *members,
               BusMcastConnection *mc,
               DBusError          *error)
{
#ifdef DBUS_HAVE_MCAST_UAPI
  BusMcastProgram peer = { NULL, 0, BUS_MCAST_PRECISION_EXACT };
  dbus_bool_t ok;

  if (!mc->stale)
    return TRUE;

  members->compilations += 1;
  ok = compile_filter (members, mc, &peer, error) &&
       stage_program (mc->connection, UNIX_PEER_FILTER_STAGE, &peer,
                      &mc->peer_filter, &mc->staged, error);
  bus_mcast_program_clear (&peer);
  if (!ok)
    return FALSE;
  mc->stale = FALSE;
  mc->recompiled = TRUE;
  return TRUE;
#else
  /* Unreachable: without the UAPI nobody is admitted (mcast-admission.c) */
  dbus_set_error_const (error, DBUS_ERROR_NOT_SUPPORTED,
                        "Built without the kernel's multicast interface");
  return FALSE;
#endif
}

/* Whether commit count @a comes before @b (counts wrap) */
static dbus_bool_t
commit_before (dbus_uint32_t a,
               dbus_uint32_t b)
{
  return (dbus_int32_t) (a - b) < 0;
}

/* @name went into (@owned_before FALSE) or out of members' hands with
 * the commit just made; before it, if not a member, @other_before owned
 * it ("" for nobody, NULL if unknown).  Without memory it is not noted:
 * a group copy read late is then taken for one sent after the change. */
static void
note_move (BusMcastMembers *members,
           const char      *name,
           dbus_bool_t      owned_before,
           const char      *other_before)
{
  Move *move = _dbus_hash_table_lookup_string (members->moves, name);

  if (move == NULL)
    {
      char *key = _dbus_strdup (name);

      move = dbus_new0 (Move, 1);
      if (key == NULL || move == NULL ||
          !_dbus_hash_table_insert_string (members->moves, key, move))
        {
          dbus_free (key);
          dbus_free (move);
          return;
        }
    }
  else
    {
      move->previous = move->last;
      move->moved_twice = TRUE;
    }

  move->last = members->commits;
  move->owned_before = owned_before;
  dbus_free (move->other_before);
  move->other_before = _dbus_strdup (other_before);
}

/* Notes whether the well-known name @name went into or out of members'
 * hands with the commit just made (members->owners holds what they own
 * now, members->owned what they owned before).  FALSE if no memory;
 * nothing changed then. */
static dbus_bool_t
note_name (BusMcastMembers *members,
           const char      *name)
{
  dbus_bool_t now = _dbus_hash_table_lookup_string (members->owners, name) != NULL;
  dbus_bool_t before = _dbus_hash_table_lookup_string (members->owned, name) != NULL;

  if (now && !before)
    {
      if (!set_add (members->owned, name))
        return FALSE;
      note_move (members, name, FALSE,
                 _dbus_hash_table_lookup_string (members->last_others, name));
    }
  else if (before && !now)
    {
      note_move (members, name, TRUE, NULL);
      _dbus_hash_table_remove_string (members->owned, name);
    }

  return TRUE;
}

/* Notes every well-known name members own now or owned before: unnoted
 * missed some.  FALSE if no memory. */
static dbus_bool_t
note_every_name (BusMcastMembers *members)
{
  DBusHashIter iter;

  _dbus_hash_iter_init (members->owners, &iter);
  while (_dbus_hash_iter_next (&iter))
    {
      if (!note_name (members, _dbus_hash_iter_get_string_key (&iter)))
        return FALSE;
    }

  _dbus_hash_iter_init (members->owned, &iter);
  while (_dbus_hash_iter_next (&iter))
    {
      const char *name = _dbus_hash_iter_get_string_key (&iter);

      if (_dbus_hash_table_lookup_string (members->owners, name) == NULL)
        {
          note_move (members, name, TRUE, NULL);
          _dbus_hash_iter_remove_entry (&iter);
        }
    }

  remove_all (members->unnoted);
  members->renote = FALSE;
  return TRUE;
}

/* Notes which well-known names went into or out of members' hands with
 * the commit just made (those in members->unnoted), and forgets moves
 * older than MOVES_KEPT_COMMITS commits.  Without memory a move is not
 * noted: a group copy read late is then taken for one sent after it. */
static void
note_moves (BusMcastMembers *members)
{
  DBusHashIter iter;

  if (members->renote)
    note_every_name (members);
  else if (!take_each (members, members->unnoted, note_name))
    members->renote = TRUE;

  /* Kept for the moves not noted yet */
  if (!members->renote)
    remove_all (members->last_others);

  if (members->commits % MOVES_KEPT_COMMITS != 0)
    return;

  _dbus_hash_iter_init (members->moves, &iter);
  while (_dbus_hash_iter_next (&iter))
    {
      Move *move = _dbus_hash_iter_get_value (&iter);

      if (commit_before (move->last, members->commits - MOVES_KEPT_COMMITS))
        _dbus_hash_iter_remove_entry (&iter);
    }
}

/* Who owned the well-known name @name when the group had made @commits
 * commits: if a member, the kernel then delivered what was addressed to
 * the name to that member.  For a count older than the moves the daemon
 * keeps, who owns it now (a member, or another). */
BusMcastOwner
bus_mcast_members_owner_then (BusMcastMembers *members,
                              const char      *name,
                              dbus_uint32_t    commits,
                              const char     **other)
{
  Move *move = _dbus_hash_table_lookup_string (members->moves, name);

  *other = NULL;
  if (move == NULL || !commit_before (commits, move->last) ||
      (move->moved_twice && commit_before (commits, move->previous)))
    return _dbus_hash_table_lookup_string (members->owned, name) != NULL ?
           BUS_MCAST_OWNER_MEMBER : BUS_MCAST_OWNER_OTHER;

  if (move->owned_before)
    return BUS_MCAST_OWNER_MEMBER;
  if (move->other_before != NULL && move->other_before[0] == '\0')
    return BUS_MCAST_OWNER_NONE;
  *other = move->other_before;
  return BUS_MCAST_OWNER_OTHER;
}

/* A member whose programs cannot be brought up to date would receive
 * what is no longer its own, or miss what is: it has to go. */
static void
disconnect_member (BusMcastMembers    *members,
                   BusMcastConnection *mc,
                   DBusError          *error)
{
  bus_context_log (members->context, DBUS_SYSTEM_LOG_WARNING,
                   "Disconnecting multicast member %s: %s",
                   bus_connection_get_name (mc->connection), error->message);
  dbus_error_free (error);
  dbus_connection_close (mc->connection);
}

/* A member's connection whose socket is still open: any accepted socket
 * of the group stages and commits for the whole group.  NULL if none. */
static DBusConnection *
group_connection (BusMcastMembers *members)
{
  DBusList *link;
  int fd;

  for (link = _dbus_list_get_first_link (&members->members);
       link != NULL;
       link = _dbus_list_get_next_link (&members->members, link))
    {
      DBusConnection *connection = ((BusMcastConnection *) link->data)->connection;

      if (dbus_connection_get_socket (connection, &fd))
        return connection;
    }

  return NULL;
}

/* Brings the daemon's program, the copy filter of every member (it runs
 * on group copies only: what a member sends to the daemon alone is never
 * filtered, so a continuation fragment that looks like a bad header
 * cannot be dropped), up to date: staged once for the whole group
 * (UNIX_GROUP_COPY_FILTER_STAGE) when it changed.  FALSE on failure; the
 * daemon then keeps getting the copies the old program passes. */
static dbus_bool_t
update_daemon_program (BusMcastMembers *members,
                       DBusError       *error)
{
  BusMcastProgram program = { NULL, 0, BUS_MCAST_PRECISION_EXACT };
  DBusConnection *any = group_connection (members);

  if (!members->daemon_stale)
    return TRUE;

  if (any == NULL)
    {
      dbus_set_error_const (error, DBUS_ERROR_DISCONNECTED,
                            "No member connection has a socket");
      return FALSE;
    }

  if (!compile_filter (members, NULL, &program, error) ||
      !stage_program (any, UNIX_GROUP_COPY_FILTER_STAGE, &program,
                      &members->daemon_program, &members->daemon_staged,
                      error))
    {
      bus_mcast_program_clear (&program);
      return FALSE;
    }

  bus_mcast_program_clear (&program);
  members->daemon_stale = FALSE;
  return TRUE;
}

dbus_bool_t
bus_mcast_members_is_activatable (BusMcastMembers *members,
                                  const char      *name)
{
  dbus_bool_t found = FALSE;
  char **names;
  int n, i;

  if (!bus_activation_list_services (bus_context_get_activation (members->context),
                                     &names, &n))
    return TRUE;

  for (i = 0; i < n && !found; i++)
    found = strcmp (names[i], name) == 0;
  dbus_free_string_array (names);
  return found;
}

/* Whether the daemon delivers a group copy addressed to @name, which
 * goes into a member's hands with this flush, to that member if it reads
 * the copy after the commit (bus_mcast_routing_route_as_sent()): the name
 * was nobody's and may start a service, or who had it is not known */
static dbus_bool_t
late_copies_follow (BusMcastMembers *members,
                    const char      *name)
{
  const char *other;

  if (name[0] == ':' ||
      _dbus_hash_table_lookup_string (members->owned, name) != NULL)
    return FALSE;

  other = _dbus_hash_table_lookup_string (members->last_others, name);
  return other == NULL ||
         (other[0] == '\0' && bus_mcast_members_is_activatable (members, name));
}

/* Diverts each member that takes a name whose late copies the daemon
 * delivers to it, before the commit: what the kernel delivers to it after
 * the commit then reaches the daemon, which queues it behind the late
 * copies (it routes the copy queue before it takes a diverted copy).  A
 * member the kernel does not divert gets a late copy after newer ones,
 * as before: nothing is lost. */
static void
divert_new_owners (BusMcastMembers *members)
{
  DBusHashTable *changed = members->renote ? members->owners : members->unnoted;
  DBusHashIter iter;
  int fd, on = 1;

  _dbus_hash_iter_init (changed, &iter);
  while (_dbus_hash_iter_next (&iter))
    {
      const char *name = _dbus_hash_iter_get_string_key (&iter);
      BusMcastConnection *mc = _dbus_hash_table_lookup_string (members->owners, name);

      if (mc != NULL && late_copies_follow (members, name) &&
          (!dbus_connection_get_socket (mc->connection, &fd) ||
           setsockopt (fd, SOL_UNIX, UNIX_PEER_DIVERT, &on, sizeof (on)) != 0))
        _dbus_verbose ("dbus-mcast: cannot divert %s before it takes %s: %s\n",
                       bus_connection_get_name (mc->connection), name,
                       _dbus_strerror (errno));
    }
}

/* UNIX_GROUP_COMMIT: installs what is staged, and comes before or after
 * every send, never during one (a barrier).  FALSE if it failed. */
static dbus_bool_t
commit_group (BusMcastMembers *members,
              DBusError       *error)
{
  DBusConnection *committer = group_connection (members);
  int fd, zero = 0;

  if (committer == NULL ||
      !dbus_connection_get_socket (committer, &fd) ||
      setsockopt (fd, SOL_UNIX, UNIX_GROUP_COMMIT, &zero, sizeof (zero)) < 0)
    {
      dbus_set_error (error, DBUS_ERROR_FAILED,
                      "Could not commit the kernel filters: %s",
                      committer == NULL ? "no member connection has a socket" :
                      _dbus_strerror (errno));
      return FALSE;
    }

  members->commits += 1;
  return TRUE;
}

/* The daemon's own member shows monitors a call to a well-known name as
 * addressed to the name's owner when it reads the call
 * (bus/mcast-observer.c), which must be the member whose filter took it.
 * So before such a name changes owner, while monitors are served, the
 * daemon holds the group's sends, commits nothing (the commit waits for
 * every send that read the filters; a send that comes later waits for the
 * hold) and reads its member dry: every call it has read was filtered
 * with the old owner, every call it reads later with the new one.  The
 * flush that installs the new filters lets the group go. */
static void
settle_observer (BusMcastMembers *members)
{
  BusMcastObserver *observer = bus_context_get_mcast_observer (members->context);
  DBusError error = DBUS_ERROR_INIT;

  if (members->settling || members->n_classic_monitors == 0 ||
      !bus_mcast_observer_hold (observer, TRUE))
    return;

  members->settling = TRUE;
  if (!commit_group (members, &error))
    {
      _dbus_verbose ("dbus-mcast: cannot settle the daemon's member: %s\n",
                     error.message);
      dbus_error_free (&error);
    }
  bus_mcast_observer_drain (observer);
}

/* Installs every program the flush staged with one UNIX_GROUP_COMMIT: a
 * message is filtered by all of them or by none, so a name moving from
 * one member to another reaches exactly one of them (doc/design.md).
 * Then tells the members whose peer filter was compiled again the owners
 * of their rules' senders (tell_owners()). */
static void
commit_staged (BusMcastMembers *members)
{
  DBusList *link, *next;
  DBusError failed = DBUS_ERROR_INIT;

  for (link = _dbus_list_get_first_link (&members->members);
       link != NULL && !members->daemon_staged &&
       !((BusMcastConnection *) link->data)->staged;
       link = _dbus_list_get_next_link (&members->members, link))
    ;
  if (link != NULL)
    divert_new_owners (members);

  if (link != NULL && commit_group (members, &failed))
    note_moves (members);

  for (link = _dbus_list_get_first_link (&members->members);
       link != NULL;
       link = next)
    {
      BusMcastConnection *mc = link->data;
      DBusError error = DBUS_ERROR_INIT;

      next = _dbus_list_get_next_link (&members->members, link);
      if (mc->staged && dbus_error_is_set (&failed))
        {
          dbus_set_error_const (&error, failed.name, failed.message);
          disconnect_member (members, mc, &error);
        }
      else if (mc->recompiled && !tell_owners (members, mc, &error))
        {
          disconnect_member (members, mc, &error);
        }
      mc->staged = FALSE;
      mc->recompiled = FALSE;
    }

  if (members->daemon_staged && dbus_error_is_set (&failed))
    {
      /* Not installed: stage it again at the next flush */
      bus_mcast_program_clear (&members->daemon_program);
      members->daemon_stale = TRUE;
    }
  members->daemon_staged = FALSE;
  dbus_error_free (&failed);
}

dbus_bool_t
bus_mcast_members_hold (BusMcastMembers *members,
                        DBusList        *connections)
{
  DBusList *link;
  int senders = 0;

  if (members == NULL || members->members == NULL)
    return FALSE;

  /* Monitors send nothing to the group */
  for (link = _dbus_list_get_first_link (&connections);
       link != NULL && senders < 2;
       link = _dbus_list_get_next_link (&connections, link))
    {
      BusMcastConnection *mc = mcast_connection_get (link->data);

      if (mc != NULL && mc->member && !mc->monitor)
        senders += 1;
    }

  if (senders < 2 ||
      !bus_mcast_observer_hold (bus_context_get_mcast_observer (members->context),
                                TRUE))
    return FALSE;

  members->group_holds += 1;
  return TRUE;
}

dbus_uint32_t
bus_mcast_members_get_group_holds (BusMcastMembers *members)
{
  return members->group_holds;
}

void
bus_mcast_members_release (BusMcastMembers *members)
{
  bus_mcast_observer_hold (bus_context_get_mcast_observer (members->context),
                           FALSE);
}

void
bus_mcast_members_flush (BusMcastMembers *members)
{
  DBusList *link, *next;
  DBusError error = DBUS_ERROR_INIT;

  /* The programs live on members' sockets: without members there is
   * nothing to install, and the marks wait for the first one.  What a
   * drain shows monitors changes nothing: the transaction that made the
   * change installs it. */
  if (members == NULL ||
      bus_mcast_observer_is_draining (bus_context_get_mcast_observer (members->context)))
    return;
  if (members->members == NULL)
    {
      /* Nobody owns a name the group could deliver */
      _dbus_assert (_dbus_hash_table_get_n_entries (members->owners) == 0);
      remove_all (members->touched);
      members->rescan = FALSE;
    }
  if (!members->dirty || members->members == NULL)
    goto settled;

  if (!update_names (members))
    {
      BUS_SET_OOM (&error);
      goto failed;
    }

  if (!update_daemon_program (members, &error))
    goto failed;

  for (link = _dbus_list_get_first_link (&members->members);
       link != NULL;
       link = next)
    {
      BusMcastConnection *mc = link->data;

      next = _dbus_list_get_next_link (&members->members, link);
      if (!update_member (members, mc, &error))
        disconnect_member (members, mc, &error);
    }

  commit_staged (members);
  members->dirty = members->daemon_stale || members->rescan ||
                   _dbus_hash_table_get_n_entries (members->touched) > 0;
  goto settled;

 failed:
  /* Left dirty: the next transaction tries again. */
  bus_context_log (members->context, DBUS_SYSTEM_LOG_WARNING,
                   "Could not update the multicast filters: %s",
                   error.message);
  dbus_error_free (&error);
 settled:
  if (members->settling)
    bus_mcast_members_release (members);
  members->settling = FALSE;
}

dbus_bool_t
bus_mcast_members_add (BusMcastMembers *members,
                       DBusConnection  *connection,
                       DBusError       *error)
{
  BusMcastConnection *mc;

  mc = mcast_connection_ensure (connection);
  if (mc == NULL || !_dbus_list_append (&members->members, mc))
    {
      BUS_SET_OOM (error);
      return FALSE;
    }

  /* A classic connection has no rules yet: it sent nothing but Hello. */
  _dbus_assert (mc->rules == NULL);
  mc->member = TRUE;
  mark_stale (members, mc);
  /* What it will own leaves the daemon's program */
  members->daemon_stale = TRUE;

  /* Its filters must be in place before it is admitted. */
  bus_mcast_members_flush (members);
  if (mc->peer_filter.insns == NULL || members->daemon_program.insns == NULL)
    {
      dbus_set_error (error, DBUS_ERROR_FAILED,
                      "Could not install the kernel filters of %s",
                      bus_connection_get_name (connection));
      _dbus_list_remove (&members->members, mc);
      mc->member = FALSE;
      return FALSE;
    }

  return TRUE;
}

void
bus_mcast_members_disconnected (BusMcastMembers *members,
                                DBusConnection  *connection)
{
  BusMcastConnection *mc = mcast_connection_get (connection);

  if (mc == NULL)
    return;

  /* Monitors see what it sent before it left, while its name still
   * resolves */
  if (mc->member && members->n_classic_monitors > 0)
    bus_mcast_observer_drain (bus_context_get_mcast_observer (members->context));

  if (mc->member && !mc->monitor)
    bus_mcast_routing_departed (bus_context_get_mcast_routing (members->context),
                                members, connection);

  /* a selective monitor is on both lists */
  _dbus_list_remove (&members->members, mc);
  _dbus_list_remove (&members->classic, mc);

  if (mc->monitor && (!mc->member || mc->selective) &&
      --members->n_classic_monitors == 0)
    {
      /* If this fails, the daemon's member keeps reading the group for
       * nobody */
      bus_mcast_observer_set_open (
          bus_context_get_mcast_observer (members->context), FALSE, NULL);
    }

  _dbus_list_clear_full (&mc->rules, (DBusFreeFunction) _dbus_match_rule_unref);
  bus_mcast_observer_forget_calls (
      bus_context_get_mcast_observer (members->context), connection);
  drop_names (members, mc);
  mc->member = FALSE;
  mc->monitor = FALSE;
  /* Its rules, names or monitoring leave the daemon's program */
  members->daemon_stale = TRUE;
  members->dirty = TRUE;
}

void
bus_mcast_members_foreach (BusMcastMembers        *members,
                           BusMcastMemberFunction  function,
                           void                   *data)
{
  DBusList *link, *next;

  for (link = _dbus_list_get_first_link (&members->members);
       link != NULL;
       link = next)
    {
      BusMcastConnection *mc = link->data;

      next = _dbus_list_get_next_link (&members->members, link);
      if (!mc->selective)
        function (mc->connection, data);
    }
}

void
bus_mcast_members_close_all (BusMcastMembers *members)
{
  DBusList *link;

  for (link = _dbus_list_get_first_link (&members->members);
       link != NULL;
       link = _dbus_list_get_next_link (&members->members, link))
    dbus_connection_close (((BusMcastConnection *) link->data)->connection);
}

dbus_bool_t
bus_mcast_members_add_rule (BusMcastMembers  *members,
                            DBusConnection   *connection,
                            const DBusString *text,
                            DBusError        *error)
{
  BusMcastConnection *mc;
  DBusMatchRule *rule;
  dbus_bool_t first;

  rule = _dbus_match_rule_parse (text, error);
  if (rule == NULL)
    return FALSE;

  mc = mcast_connection_ensure (connection);
  if (mc == NULL)
    goto oom;

  first = !mc->member && mc->rules == NULL;
  if (!_dbus_list_append (&mc->rules, rule))
    goto oom;

  if (first && !_dbus_list_append (&members->classic, mc))
    {
      _dbus_list_remove_last (&mc->rules, rule);
      goto oom;
    }

  mark_stale (members, mc);
  return TRUE;

 oom:
  _dbus_match_rule_unref (rule);
  BUS_SET_OOM (error);
  return FALSE;
}

void
bus_mcast_members_remove_rule (BusMcastMembers  *members,
                               DBusConnection   *connection,
                               const DBusString *text)
{
  BusMcastConnection *mc = mcast_connection_get (connection);
  DBusMatchRule *rule;

  if (mc == NULL)
    return;

  rule = _dbus_match_rule_parse (text, NULL);
  if (rule == NULL)
    {
      /* Out of memory: the rule stays, and the filter keeps passing what
       * it asked for, which libdbus drops (doc/design.md). */
      return;
    }

  if (_dbus_match_rule_list_remove (&mc->rules, rule))
    mark_stale (members, mc);

  _dbus_match_rule_unref (rule);
}

dbus_bool_t
bus_mcast_members_become_monitor (BusMcastMembers *members,
                                  DBusConnection  *connection,
                                  dbus_bool_t      selective,
                                  DBusError       *error)
{
  BusMcastConnection *mc;

  mc = mcast_connection_ensure (connection);
  if (mc == NULL)
    {
      BUS_SET_OOM (error);
      return FALSE;
    }

  if (mc->monitor)
    return TRUE;

  if (!mc->member || selective)
    {
      BusMcastObserver *observer =
          bus_context_get_mcast_observer (members->context);

      /* A classic or selective monitor is sent copies by the daemon,
       * which reads everything members send from its own member of the
       * group from now on.  A classic connection with rules is on the
       * classic list already. */
      if (members->n_classic_monitors == 0)
        {
          if (!bus_mcast_observer_set_open (observer, TRUE, error))
            return FALSE;
          /* The calls made before, the members' tables list; the
           * commit is the barrier between what the daemon's member
           * read and what they list (no member, no table) */
          if (group_connection (members) != NULL &&
              !commit_group (members, error))
            {
              bus_mcast_observer_set_open (observer, FALSE, NULL);
              return FALSE;
            }
          bus_mcast_observer_take_listed_calls (observer);
        }

      if (_dbus_list_find_last (&members->classic, mc) == NULL &&
          !_dbus_list_append (&members->classic, mc))
        {
          if (members->n_classic_monitors == 0)
            bus_mcast_observer_set_open (observer, FALSE, NULL);
          BUS_SET_OOM (error);
          return FALSE;
        }
      members->n_classic_monitors += 1;
    }

  /* Like the daemon, forget the rules it had: a monitor gets everything
   * its BecomeMonitor rules match, through an accept-all filter. */
  _dbus_list_clear_full (&mc->rules, (DBusFreeFunction) _dbus_match_rule_unref);
  mc->selective = mc->member && selective;
  mc->monitor = TRUE;
  mark_stale (members, mc);
  return TRUE;
}

/* Whether the unique name @name (or nobody: NULL, "") is a member */
static dbus_bool_t
is_member_name (BusMcastMembers *members,
                const char      *name)
{
  DBusConnection *owner;

  if (name == NULL || name[0] == '\0')
    return FALSE;

  owner = bus_mcast_owner_of (bus_context_get_registry (members->context), name);
  return owner != NULL && bus_mcast_members_is_member (owner);
}

void
bus_mcast_members_name_owner_changed (BusMcastMembers *members,
                                      const char      *name,
                                      const char      *old_owner)
{
  DBusList *link;
  char *key;

  if (members == NULL)
    return;

  /* Classic clients' rules in the daemon's program compile sender= keys
   * as their owners (it restages only if that changed it) */
  members->daemon_stale = TRUE;
  members->dirty = TRUE;

  /* A unique name is compiled as itself.  A well-known one is in the
   * programs of its old and new owners, which the flush looks up
   * (update_names()), and of the members whose rules' sender= keys name
   * it, compiled as its owner's unique name. */
  if (name[0] == ':')
    return;

  touch_name (members, name);
  settle_observer (members);

  /* A message sent before the name went into a member's hands was for
   * the last owner it had that was not a member: a stock daemon could
   * have read it just before (note_moves()).  Without memory, that is
   * unknown: a late copy is then delivered as the name stands when the
   * daemon reads it. */
  if (!is_member_name (members, old_owner))
    {
      char *owner = _dbus_strdup (old_owner != NULL ? old_owner : "");

      key = _dbus_strdup (name);
      if (key == NULL || owner == NULL ||
          !_dbus_hash_table_insert_string (members->last_others, key, owner))
        {
          dbus_free (key);
          dbus_free (owner);
          _dbus_hash_table_remove_string (members->last_others, name);
        }
    }

  for (link = _dbus_list_get_first_link (&members->members);
       link != NULL;
       link = _dbus_list_get_next_link (&members->members, link))
    {
      BusMcastConnection *mc = link->data;
      DBusList *rule;

      for (rule = _dbus_list_get_first_link (&mc->rules);
           rule != NULL && !mc->stale;
           rule = _dbus_list_get_next_link (&mc->rules, rule))
        {
          const char *sender = ((DBusMatchRule *) rule->data)->sender;

          if (sender != NULL && strcmp (sender, name) == 0)
            mc->stale = TRUE;
        }
    }
}
