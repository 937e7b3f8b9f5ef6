/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-match-rule.c  Match rules as libdbus itself parses and evaluates them
 *
 * What this module is for: see dbus-match-rule.h.  In short, the parsed form
 * of an AddMatch rule, shared by libdbus (which checks the broadcasts a
 * loose kernel filter let through) and dbus-daemon (which compiles the same
 * form into that filter).  Parsing accepts and rejects exactly what
 * dbus-daemon 1.14's AddMatch does, quirks included, and matching follows
 * dbus-daemon's rules as far as the message alone can tell.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>
#include "dbus-match-rule.h"
#include "dbus-marshal-validate.h"
#include "dbus-protocol.h"
#include "dbus-shared.h"

#include <string.h>

/**
 * @defgroup DBusMatchRule Match rules
 * @ingroup  DBusInternals
 * @brief Parsed AddMatch rules and message matching
 * @{
 */

/* dbus-daemon reads at most this many key=value pairs from a rule and
 * silently ignores whatever follows them. */
#define MAX_RULE_KEYS 16

#define IS_RULE_SPACE(c) ((c) == ' ' || (c) == '\t' || (c) == '\n' || (c) == '\r')

/**
 * Adds a reference to a match rule.
 *
 * @param rule the rule
 * @returns the rule
 */
DBusMatchRule *
_dbus_match_rule_ref (DBusMatchRule *rule)
{
  _dbus_assert (rule->refcount > 0);

  rule->refcount += 1;

  return rule;
}

/**
 * Drops a reference to a match rule, freeing it with the last one.
 *
 * @param rule the rule
 */
void
_dbus_match_rule_unref (DBusMatchRule *rule)
{
  int i;

  _dbus_assert (rule->refcount > 0);

  rule->refcount -= 1;
  if (rule->refcount > 0)
    return;

  dbus_free (rule->interface);
  dbus_free (rule->member);
  dbus_free (rule->sender);
  dbus_free (rule->destination);
  dbus_free (rule->path);

  /* not dbus_free_string_array(): args has holes */
  for (i = 0; i < rule->args_len; i++)
    dbus_free (rule->args[i]);

  dbus_free (rule->args);
  dbus_free (rule->arg_lens);
  dbus_free (rule);
}

/*
 * Reads the key of the next key=value pair of @text, starting at *@pos,
 * into @key (which must be empty).  Whitespace around the key is skipped.
 * Leaves @key empty if only whitespace is left, otherwise sets *@pos just
 * after the '='.
 */
static dbus_bool_t
read_key (const char *text,
          int        *pos,
          DBusString *key,
          DBusError  *error)
{
  const char *p;
  const char *start;

  p = text + *pos;

  while (*p != '\0' && IS_RULE_SPACE (*p))
    p++;

  start = p;

  while (*p != '\0' && *p != '=' && !IS_RULE_SPACE (*p))
    p++;

  if (p == start)
    return TRUE;

  if (!_dbus_string_append_len (key, start, p - start))
    {
      _DBUS_SET_OOM (error);
      return FALSE;
    }

  while (*p != '\0' && IS_RULE_SPACE (*p))
    p++;

  if (*p != '=')
    {
      dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                      "Key '%s' in match rule is not followed by '='",
                      _dbus_string_get_const_data (key));
      return FALSE;
    }

  *pos = p + 1 - text;
  return TRUE;
}

/*
 * Reads the value that starts at *@pos of @text into @value (which must be
 * empty), up to and including the next ',' outside quotes, and sets *@pos
 * after it.  Whitespace is part of the value; apostrophes quote, and
 * outside quotes a backslash escapes an apostrophe and stands for itself
 * before anything else.  An empty value is valid.
 */
static dbus_bool_t
read_value (const char *text,
            int        *pos,
            DBusString *value,
            DBusError  *error)
{
  const char *p;
  dbus_bool_t in_quotes;
  dbus_bool_t after_backslash;

  in_quotes = FALSE;
  after_backslash = FALSE;

  for (p = text + *pos; *p != '\0'; p++)
    {
      if (in_quotes)
        {
          if (*p == '\'')
            {
              in_quotes = FALSE;
              continue;
            }
        }
      else if (after_backslash)
        {
          after_backslash = FALSE;

          if (*p != '\'' && !_dbus_string_append_byte (value, '\\'))
            goto oom;
        }
      else if (*p == '\'')
        {
          in_quotes = TRUE;
          continue;
        }
      else if (*p == '\\')
        {
          after_backslash = TRUE;
          continue;
        }
      else if (*p == ',')
        {
          p++;
          break;
        }

      if (!_dbus_string_append_byte (value, *p))
        goto oom;
    }

  if (in_quotes)
    {
      dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                      "Unbalanced quotation marks in match rule");
      return FALSE;
    }

  /* a backslash at the very end stands for itself */
  if (after_backslash && !_dbus_string_append_byte (value, '\\'))
    goto oom;

  *pos = p - text;
  return TRUE;

 oom:
  _DBUS_SET_OOM (error);
  return FALSE;
}

/* Moves the content of @value into *@field, leaving @value empty */
static dbus_bool_t
take_value (DBusString  *value,
            char       **field,
            DBusError   *error)
{
  _dbus_assert (*field == NULL);

  if (!_dbus_string_steal_data (value, field))
    {
      _DBUS_SET_OOM (error);
      return FALSE;
    }

  return TRUE;
}

/* Handles an argN=, argNpath= or arg0namespace= key */
static dbus_bool_t
parse_arg_key (DBusMatchRule *rule,
               const char    *key,
               DBusString    *value,
               DBusError     *error)
{
  DBusString key_str;
  unsigned long n;
  int end;
  int value_len;
  unsigned int flags;

  _dbus_string_init_const (&key_str, key);
  value_len = _dbus_string_get_length (value);
  flags = 0;

  /* like dbus-daemon: any number strtoul() reads with base 0 */
  if (_dbus_string_get_length (&key_str) < 4 ||
      !_dbus_string_parse_uint (&key_str, 3, &n, &end))
    {
      dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                      "Key '%s' in match rule starts with 'arg' but has no "
                      "argument number, as in 'arg0' or 'arg7'", key);
      return FALSE;
    }

  if (strcmp (key + end, "path") == 0)
    {
      flags = DBUS_MATCH_ARG_IS_PATH;
    }
  else if (strcmp (key, "arg0namespace") == 0)
    {
      if (!_dbus_validate_bus_namespace (value, 0, value_len))
        {
          dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                          "arg0namespace='%s' is not a valid prefix of a "
                          "bus name", _dbus_string_get_const_data (value));
          return FALSE;
        }

      flags = DBUS_MATCH_ARG_NAMESPACE;
    }
  else if (key[end] != '\0')
    {
      dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                      "Key '%s' in match rule has junk after the argument "
                      "number: only 'arg%lupath' or 'arg0namespace' are "
                      "valid", key, n);
      return FALSE;
    }

  if (n > DBUS_MAXIMUM_MATCH_RULE_ARG_NUMBER)
    {
      dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                      "Key '%s' in match rule has argument number %lu, "
                      "the maximum is %d", key, n,
                      DBUS_MAXIMUM_MATCH_RULE_ARG_NUMBER);
      return FALSE;
    }

  if ((int) n < rule->args_len && rule->args[n] != NULL)
    {
      dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                      "Argument %lu matched more than once in match rule", n);
      return FALSE;
    }

  if ((int) n >= rule->args_len)
    {
      char **args;
      unsigned int *arg_lens;
      int i;

      args = dbus_realloc (rule->args, (n + 1) * sizeof (char *));
      if (args == NULL)
        goto oom;
      rule->args = args;

      arg_lens = dbus_realloc (rule->arg_lens, (n + 1) * sizeof (unsigned int));
      if (arg_lens == NULL)
        goto oom;
      rule->arg_lens = arg_lens;

      for (i = rule->args_len; i <= (int) n; i++)
        {
          rule->args[i] = NULL;
          rule->arg_lens[i] = 0;
        }

      rule->args_len = n + 1;
    }

  if (!take_value (value, &rule->args[n], error))
    return FALSE;

  rule->arg_lens[n] = (unsigned int) value_len | flags;
  rule->flags |= DBUS_MATCH_ARGS;
  return TRUE;

 oom:
  _DBUS_SET_OOM (error);
  return FALSE;
}

/* Handles the keys whose value is a bus name, interface, member or path,
 * and rejects unknown keys */
static dbus_bool_t
parse_name_key (DBusMatchRule *rule,
                const char    *key,
                DBusString    *value,
                DBusError     *error)
{
  int len;
  unsigned int flag;
  char **field;
  dbus_bool_t valid;

  len = _dbus_string_get_length (value);

  if (strcmp (key, "sender") == 0)
    {
      flag = DBUS_MATCH_SENDER;
      field = &rule->sender;
      valid = _dbus_validate_bus_name (value, 0, len);
    }
  else if (strcmp (key, "destination") == 0)
    {
      flag = DBUS_MATCH_DESTINATION;
      field = &rule->destination;
      valid = _dbus_validate_bus_name (value, 0, len);
    }
  else if (strcmp (key, "interface") == 0)
    {
      flag = DBUS_MATCH_INTERFACE;
      field = &rule->interface;
      valid = _dbus_validate_interface (value, 0, len);
    }
  else if (strcmp (key, "member") == 0)
    {
      flag = DBUS_MATCH_MEMBER;
      field = &rule->member;
      valid = _dbus_validate_member (value, 0, len);
    }
  else if (strcmp (key, "path") == 0 ||
           strcmp (key, "path_namespace") == 0)
    {
      flag = (strcmp (key, "path") == 0) ?
        DBUS_MATCH_PATH : DBUS_MATCH_PATH_NAMESPACE;
      field = &rule->path;
      valid = _dbus_validate_path (value, 0, len);

      if (rule->flags & (DBUS_MATCH_PATH | DBUS_MATCH_PATH_NAMESPACE))
        {
          dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                          "Match rule has path or path_namespace twice");
          return FALSE;
        }
    }
  else
    {
      dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                      "Unknown key '%s' in match rule", key);
      return FALSE;
    }

  if (rule->flags & flag)
    {
      dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                      "Key '%s' appears twice in match rule", key);
      return FALSE;
    }

  if (!valid)
    {
      dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                      "Value '%s' of key '%s' in match rule is invalid",
                      _dbus_string_get_const_data (value), key);
      return FALSE;
    }

  if (!take_value (value, field, error))
    return FALSE;

  rule->flags |= flag;
  return TRUE;
}

/* Applies one key=value pair to @rule; may empty @value */
static dbus_bool_t
parse_key (DBusMatchRule *rule,
           const char    *key,
           DBusString    *value,
           DBusError     *error)
{
  const char *v;

  v = _dbus_string_get_const_data (value);

  if (strcmp (key, "type") == 0)
    {
      int type;

      if (rule->flags & DBUS_MATCH_MESSAGE_TYPE)
        {
          dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                          "Key 'type' appears twice in match rule");
          return FALSE;
        }

      type = dbus_message_type_from_string (v);
      if (type == DBUS_MESSAGE_TYPE_INVALID)
        {
          dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                          "Invalid message type '%s' in match rule", v);
          return FALSE;
        }

      rule->flags |= DBUS_MATCH_MESSAGE_TYPE;
      rule->message_type = type;
      return TRUE;
    }
  else if (strcmp (key, "eavesdrop") == 0)
    {
      /* May appear more than once, so that a client can turn off the
       * eavesdrop=true a tool added to its rule; the last one counts. */
      if (strcmp (v, "true") == 0)
        rule->flags |= DBUS_MATCH_CLIENT_IS_EAVESDROPPING;
      else if (strcmp (v, "false") == 0)
        rule->flags &= ~DBUS_MATCH_CLIENT_IS_EAVESDROPPING;
      else
        {
          dbus_set_error (error, DBUS_ERROR_MATCH_RULE_INVALID,
                          "eavesdrop='%s' is invalid, it should be 'true' "
                          "or 'false'", v);
          return FALSE;
        }

      return TRUE;
    }
  else if (strncmp (key, "arg", 3) == 0)
    {
      return parse_arg_key (rule, key, value, error);
    }

  return parse_name_key (rule, key, value, error);
}

/**
 * Parses a match rule as dbus-daemon's AddMatch does: comma-separated
 * key=value pairs, values optionally quoted with apostrophes ('\'' or \'
 * for a literal apostrophe).  As in dbus-daemon 1.14, a rule longer than
 * #DBUS_MAXIMUM_MATCH_RULE_LENGTH fails with #DBUS_ERROR_LIMITS_EXCEEDED,
 * only the first 16 pairs are read (the rest of the text is ignored), and
 * reading also stops at a pair with an empty key (e.g. "=x").  Parsing stops
 * at a nul byte, as in the daemon where the rule is a C string.
 *
 * @param text the rule
 * @param error set to #DBUS_ERROR_MATCH_RULE_INVALID, #DBUS_ERROR_LIMITS_EXCEEDED
 *  or #DBUS_ERROR_NO_MEMORY on failure
 * @returns a new rule (unref it), or #NULL
 */
DBusMatchRule *
_dbus_match_rule_parse (const DBusString *text,
                        DBusError        *error)
{
  DBusMatchRule *rule;
  DBusString key;
  DBusString value;
  const char *data;
  int pos;
  int n_keys;

  _DBUS_ASSERT_ERROR_IS_CLEAR (error);

  if (_dbus_string_get_length (text) > DBUS_MAXIMUM_MATCH_RULE_LENGTH)
    {
      dbus_set_error (error, DBUS_ERROR_LIMITS_EXCEEDED,
                      "Match rule text is %d bytes, maximum is %d",
                      _dbus_string_get_length (text),
                      DBUS_MAXIMUM_MATCH_RULE_LENGTH);
      return NULL;
    }

  rule = dbus_new0 (DBusMatchRule, 1);
  if (rule == NULL)
    {
      _DBUS_SET_OOM (error);
      return NULL;
    }
  rule->refcount = 1;

  if (!_dbus_string_init (&key))
    {
      _DBUS_SET_OOM (error);
      dbus_free (rule);
      return NULL;
    }

  if (!_dbus_string_init (&value))
    {
      _DBUS_SET_OOM (error);
      _dbus_string_free (&key);
      dbus_free (rule);
      return NULL;
    }

  data = _dbus_string_get_const_data (text);
  pos = 0;

  for (n_keys = 0;
       n_keys < MAX_RULE_KEYS && pos < _dbus_string_get_length (text);
       n_keys++)
    {
      _dbus_string_set_length (&key, 0);
      _dbus_string_set_length (&value, 0);

      if (!read_key (data, &pos, &key, error))
        goto failed;

      if (_dbus_string_get_length (&key) == 0)
        break;

      if (!read_value (data, &pos, &value, error) ||
          !parse_key (rule, _dbus_string_get_const_data (&key), &value, error))
        goto failed;
    }

  _dbus_string_free (&key);
  _dbus_string_free (&value);
  return rule;

 failed:
  _DBUS_ASSERT_ERROR_IS_SET (error);
  _dbus_string_free (&key);
  _dbus_string_free (&value);
  _dbus_match_rule_unref (rule);
  return NULL;
}

static dbus_bool_t
str_equal_or_null (const char *a,
                   const char *b)
{
  if (a == NULL || b == NULL)
    return a == b;

  return strcmp (a, b) == 0;
}

/**
 * Whether two rules are the same rule in the sense of dbus-daemon's
 * RemoveMatch: the same keys with the same values, in any order and
 * however quoted, except that (as in dbus-daemon 1.14) the values of two
 * path_namespace= keys are not compared.
 *
 * @param a a rule
 * @param b another rule
 * @returns #TRUE if they are equal
 */
dbus_bool_t
_dbus_match_rule_equal (const DBusMatchRule *a,
                        const DBusMatchRule *b)
{
  int i;

  if (a->flags != b->flags)
    return FALSE;

  if ((a->flags & DBUS_MATCH_MESSAGE_TYPE) &&
      a->message_type != b->message_type)
    return FALSE;

  if (!str_equal_or_null (a->interface, b->interface) ||
      !str_equal_or_null (a->member, b->member) ||
      !str_equal_or_null (a->sender, b->sender) ||
      !str_equal_or_null (a->destination, b->destination))
    return FALSE;

  /* dbus-daemon 1.14 compares the value of path= but not that of
   * path_namespace=, so RemoveMatch with any path_namespace= removes a
   * rule with another one; follow it, to remove what it removes */
  if ((a->flags & DBUS_MATCH_PATH) && strcmp (a->path, b->path) != 0)
    return FALSE;

  if (a->args_len != b->args_len)
    return FALSE;

  for (i = 0; i < a->args_len; i++)
    {
      if (a->arg_lens[i] != b->arg_lens[i] ||
          !str_equal_or_null (a->args[i], b->args[i]))
        return FALSE;
    }

  return TRUE;
}

dbus_bool_t
_dbus_match_rule_list_remove (DBusList           **rules,
                              const DBusMatchRule *rule)
{
  DBusList *link;

  /* Backwards, like dbus-daemon: equal rules may differ in what
   * _dbus_match_rule_equal() does not compare (path_namespace) */
  for (link = _dbus_list_get_last_link (rules);
       link != NULL;
       link = _dbus_list_get_prev_link (rules, link))
    {
      if (_dbus_match_rule_equal (link->data, rule))
        {
          _dbus_match_rule_unref (link->data);
          _dbus_list_remove_link (rules, link);
          return TRUE;
        }
    }

  return FALSE;
}

/* Whether the connection a message is addressed to may own @name, given
 * only the message's DESTINATION @addressed: the bus (org.freedesktop.DBus)
 * owns no other name, a unique name owns no other unique name, and the
 * owners of well-known names are unknown here. */
static dbus_bool_t
may_own_name (const char *addressed,
              const char *name)
{
  if (strcmp (addressed, name) == 0)
    return TRUE;

  if (strcmp (addressed, DBUS_SERVICE_DBUS) == 0 ||
      strcmp (name, DBUS_SERVICE_DBUS) == 0)
    return FALSE;

  if (addressed[0] == ':')
    return name[0] != ':';

  return TRUE;
}

/* argNpath=: equal, or one is a prefix of the other that ends with '/' */
static dbus_bool_t
arg_path_matches (const char *expected,
                  int         expected_len,
                  const char *actual)
{
  int actual_len;

  actual_len = strlen (actual);

  if (actual_len < expected_len &&
      (actual_len == 0 || actual[actual_len - 1] != '/'))
    return FALSE;

  if (expected_len < actual_len &&
      (expected_len == 0 || expected[expected_len - 1] != '/'))
    return FALSE;

  return memcmp (expected, actual, MIN (expected_len, actual_len)) == 0;
}

/* arg0namespace=: equal, or a prefix followed by '.' */
static dbus_bool_t
arg_namespace_matches (const char *expected,
                       int         expected_len,
                       const char *actual)
{
  if (strncmp (expected, actual, expected_len) != 0)
    return FALSE;

  return actual[expected_len] == '\0' || actual[expected_len] == '.';
}

static dbus_bool_t
args_match (const DBusMatchRule *rule,
            DBusMessage         *message)
{
  DBusMessageIter iter;
  int i;

  dbus_message_iter_init (message, &iter);

  for (i = 0; i < rule->args_len; i++)
    {
      int type;

      type = dbus_message_iter_get_arg_type (&iter);

      if (rule->args[i] != NULL)
        {
          const char *actual;
          int expected_len;
          unsigned int flags;

          expected_len = rule->arg_lens[i] & ~DBUS_MATCH_ARG_FLAGS;
          flags = rule->arg_lens[i] & DBUS_MATCH_ARG_FLAGS;

          /* argN only ever matches strings, argNpath also object paths */
          if (type != DBUS_TYPE_STRING &&
              (type != DBUS_TYPE_OBJECT_PATH ||
               !(flags & DBUS_MATCH_ARG_IS_PATH)))
            return FALSE;

          dbus_message_iter_get_basic (&iter, &actual);

          if (flags & DBUS_MATCH_ARG_IS_PATH)
            {
              if (!arg_path_matches (rule->args[i], expected_len, actual))
                return FALSE;
            }
          else if (flags & DBUS_MATCH_ARG_NAMESPACE)
            {
              if (!arg_namespace_matches (rule->args[i], expected_len, actual))
                return FALSE;
            }
          else if (strcmp (rule->args[i], actual) != 0)
            {
              return FALSE;
            }
        }

      dbus_message_iter_next (&iter);
    }

  return TRUE;
}

/**
 * Whether dbus-daemon would find that @message matches @rule, a rule of
 * the connection @receiver, as far as the message itself can tell.  This is
 * dbus-daemon's test of one rule, not its whole routing decision: as in
 * dbus-daemon, a message with a DESTINATION only matches a rule with
 * eavesdrop=true, even when it is addressed to @receiver (dbus-daemon
 * delivers those whatever the rules say, and so must the caller).
 *
 * Name ownership is known only for the names in sender= keys, so:
 *  - sender=: a unique name must equal the SENDER field;
 *    org.freedesktop.DBus matches what the bus itself sent (SENDER is
 *    org.freedesktop.DBus); any other well-known name matches if @owners
 *    maps it to the SENDER field;
 *  - destination=: the message's DESTINATION stands for the connection it
 *    is addressed to.  @receiver's own unique name must equal it (a
 *    message to a well-known name that @receiver owns is delivered to it
 *    as the addressed recipient anyway); org.freedesktop.DBus must equal
 *    it; another unique name must equal it, or it must be a well-known
 *    name, whose owner is unknown; another well-known name matches unless
 *    DESTINATION is org.freedesktop.DBus.
 * Where this says "matches" and dbus-daemon would not, the kernel filter
 * dbus-daemon compiled, which knows the owners, has already decided.
 *
 * @param rule the rule
 * @param message a message whose SENDER has been checked
 * @param receiver the unique name of the connection the rule belongs to
 * @param owners well-known name -> unique name of its owner, for the
 *   well-known names of the connection's sender= keys
 * @returns #TRUE if the message matches
 */
dbus_bool_t
_dbus_match_rule_matches (const DBusMatchRule *rule,
                          DBusMessage         *message,
                          const char          *receiver,
                          DBusHashTable       *owners)
{
  const char *destination;

  _dbus_assert (receiver != NULL && receiver[0] == ':');

  if ((rule->flags & DBUS_MATCH_MESSAGE_TYPE) &&
      rule->message_type != dbus_message_get_type (message))
    return FALSE;

  if ((rule->flags & DBUS_MATCH_INTERFACE) &&
      !str_equal_or_null (rule->interface, dbus_message_get_interface (message)))
    return FALSE;

  if ((rule->flags & DBUS_MATCH_MEMBER) &&
      !str_equal_or_null (rule->member, dbus_message_get_member (message)))
    return FALSE;

  if (rule->flags & DBUS_MATCH_SENDER)
    {
      const char *sender;
      const char *owner = rule->sender;

      sender = dbus_message_get_sender (message);

      if (rule->sender[0] != ':' &&
          strcmp (rule->sender, DBUS_SERVICE_DBUS) != 0)
        owner = _dbus_hash_table_lookup_string (owners, rule->sender);

      if (owner == NULL || !str_equal_or_null (owner, sender))
        return FALSE;
    }

  destination = dbus_message_get_destination (message);

  if (destination != NULL &&
      !(rule->flags & DBUS_MATCH_CLIENT_IS_EAVESDROPPING))
    return FALSE;

  if (rule->flags & DBUS_MATCH_DESTINATION)
    {
      if (destination == NULL)
        return FALSE;

      /* A message to a well-known name that @receiver owns reaches it
       * as the addressed recipient anyway, and one to a name it does not
       * own does not match: only its unique name can match here. */
      if (strcmp (rule->destination, receiver) == 0)
        {
          if (strcmp (destination, receiver) != 0)
            return FALSE;
        }
      else if (!may_own_name (destination, rule->destination))
        {
          return FALSE;
        }
    }

  if ((rule->flags & DBUS_MATCH_PATH) &&
      !str_equal_or_null (rule->path, dbus_message_get_path (message)))
    return FALSE;

  if (rule->flags & DBUS_MATCH_PATH_NAMESPACE)
    {
      const char *path;
      size_t len;

      path = dbus_message_get_path (message);
      len = strlen (rule->path);

      if (path == NULL || strncmp (path, rule->path, len) != 0)
        return FALSE;

      /* "/" is the namespace of every path; otherwise the prefix must end
       * at a path element */
      if (len > 1 && path[len] != '\0' && path[len] != '/')
        return FALSE;
    }

  if ((rule->flags & DBUS_MATCH_ARGS) && !args_match (rule, message))
    return FALSE;

  return TRUE;
}

/** @} */
