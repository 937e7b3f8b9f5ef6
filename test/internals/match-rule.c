/* test/internals/match-rule.c  Unit tests of dbus/dbus-match-rule.c
 *
 * Parsing, equality and matching of match rules, checked against tables.
 * The same tables are checked against a real dbus-daemon by the
 * /match-rule/daemon/ tests: every rule of the parse table goes through
 * AddMatch, and every (rule, message) pair of the match table is sent
 * through the bus to see whether a connection with that rule receives the
 * message.  They run when DBUS_TEST_DAEMON_ADDRESS names a running bus
 * (same user: eavesdropping needs it) or DBUS_MCAST_STAGE names a staging
 * prefix whose bin/dbus-daemon the test starts with --session; otherwise
 * they are skipped.
 *
 * Built against libdbus' internal static libraries (the functions are
 * private); see test/dbus/check.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */

#include <config.h>

#include <dbus/dbus.h>
#include <dbus/dbus-match-rule.h>
#include <dbus/dbus-string.h>

#include <glib.h>

#include "oom-loop.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>

/* Names that "@S", "@O" and "@R" stand for in the tables: the sender,
 * another connection that messages may be addressed to, and the
 * connection that owns the rule.  The sender and the other connection own
 * the well-known names SENDER_NAME and OTHER_NAME. */
#define SENDER_NAME "com.example.Sender"
#define OTHER_NAME "com.example.Other"

typedef struct
{
  const char *sender;
  const char *other;
  const char *receiver;
} Names;

static const Names offline_names = { ":1.42", ":1.43", ":1.44" };

/* Replaces @S, @O and @R in @text */
static gchar *
expand (const char  *text,
        const Names *names)
{
  GString *s = g_string_new (NULL);
  const char *p;

  for (p = text; *p != '\0'; p++)
    {
      if (p[0] == '@' && p[1] == 'S')
        g_string_append (s, names->sender);
      else if (p[0] == '@' && p[1] == 'O')
        g_string_append (s, names->other);
      else if (p[0] == '@' && p[1] == 'R')
        g_string_append (s, names->receiver);
      else
        {
          g_string_append_c (s, *p);
          continue;
        }

      p++;
    }

  return g_string_free (s, FALSE);
}

static DBusMatchRule *
parse (const char *text,
       DBusError  *error)
{
  DBusString str;

  _dbus_string_init_const (&str, text);
  return _dbus_match_rule_parse (&str, error);
}

static DBusMatchRule *
parse_ok (const char *text)
{
  DBusError error = DBUS_ERROR_INIT;
  DBusMatchRule *rule;

  rule = parse (text, &error);

  if (rule == NULL)
    g_error ("\"%s\" failed to parse: %s: %s", text, error.name,
             error.message);

  g_assert_false (dbus_error_is_set (&error));
  g_assert_cmpint (rule->refcount, ==, 1);
  return rule;
}

/* ---- parsing: what each key does to the struct ---- */

static void
test_parse_keys (void)
{
  DBusMatchRule *rule;

  rule = parse_ok ("type='signal',sender='org.example.Sender',"
                   "interface='org.example.Iface',member='Foo',"
                   "path='/bar/foo',destination=':452345.34'");
  g_assert_cmpuint (rule->flags, ==,
                    DBUS_MATCH_MESSAGE_TYPE | DBUS_MATCH_SENDER |
                    DBUS_MATCH_INTERFACE | DBUS_MATCH_MEMBER |
                    DBUS_MATCH_PATH | DBUS_MATCH_DESTINATION);
  g_assert_cmpint (rule->message_type, ==, DBUS_MESSAGE_TYPE_SIGNAL);
  g_assert_cmpstr (rule->sender, ==, "org.example.Sender");
  g_assert_cmpstr (rule->interface, ==, "org.example.Iface");
  g_assert_cmpstr (rule->member, ==, "Foo");
  g_assert_cmpstr (rule->path, ==, "/bar/foo");
  g_assert_cmpstr (rule->destination, ==, ":452345.34");
  g_assert_null (rule->args);
  g_assert_null (rule->arg_lens);
  g_assert_cmpint (rule->args_len, ==, 0);
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("type='method_call'");
  g_assert_cmpint (rule->message_type, ==, DBUS_MESSAGE_TYPE_METHOD_CALL);
  _dbus_match_rule_unref (rule);
  rule = parse_ok ("type='method_return'");
  g_assert_cmpint (rule->message_type, ==, DBUS_MESSAGE_TYPE_METHOD_RETURN);
  _dbus_match_rule_unref (rule);
  rule = parse_ok ("type='error'");
  g_assert_cmpint (rule->message_type, ==, DBUS_MESSAGE_TYPE_ERROR);
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("path_namespace='/foo/bar'");
  g_assert_cmpuint (rule->flags, ==, DBUS_MATCH_PATH_NAMESPACE);
  g_assert_cmpstr (rule->path, ==, "/foo/bar");
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("path_namespace='/'");
  g_assert_cmpuint (rule->flags, ==, DBUS_MATCH_PATH_NAMESPACE);
  g_assert_cmpstr (rule->path, ==, "/");
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("eavesdrop='true'");
  g_assert_cmpuint (rule->flags, ==, DBUS_MATCH_CLIENT_IS_EAVESDROPPING);
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("eavesdrop='false'");
  g_assert_cmpuint (rule->flags, ==, 0);
  _dbus_match_rule_unref (rule);

  /* eavesdrop may be repeated, the last one counts */
  rule = parse_ok ("eavesdrop=true,eavesdrop=false");
  g_assert_cmpuint (rule->flags, ==, 0);
  _dbus_match_rule_unref (rule);
  rule = parse_ok ("eavesdrop=false,eavesdrop=true,eavesdrop=true");
  g_assert_cmpuint (rule->flags, ==, DBUS_MATCH_CLIENT_IS_EAVESDROPPING);
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("sender='org.freedesktop.DBus',destination='com.example'");
  g_assert_cmpstr (rule->sender, ==, "org.freedesktop.DBus");
  g_assert_cmpstr (rule->destination, ==, "com.example");
  _dbus_match_rule_unref (rule);
}

static void
test_parse_args (void)
{
  DBusMatchRule *rule;
  int i;

  rule = parse_ok ("arg0='foo'");
  g_assert_cmpuint (rule->flags, ==, DBUS_MATCH_ARGS);
  g_assert_cmpint (rule->args_len, ==, 1);
  g_assert_cmpstr (rule->args[0], ==, "foo");
  g_assert_cmpuint (rule->arg_lens[0], ==, 3);
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("arg2='foo'");
  g_assert_cmpint (rule->args_len, ==, 3);
  g_assert_null (rule->args[0]);
  g_assert_null (rule->args[1]);
  g_assert_cmpuint (rule->arg_lens[0], ==, 0);
  g_assert_cmpstr (rule->args[2], ==, "foo");
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("arg63='x'");
  g_assert_cmpint (rule->args_len, ==, 64);
  for (i = 0; i < 63; i++)
    g_assert_null (rule->args[i]);
  g_assert_cmpstr (rule->args[63], ==, "x");
  _dbus_match_rule_unref (rule);

  /* growing the arrays keeps what was there */
  rule = parse_ok ("arg1='a',arg5path='/b/',arg3='',arg0namespace='c.d'");
  g_assert_cmpint (rule->args_len, ==, 6);
  g_assert_cmpstr (rule->args[0], ==, "c.d");
  g_assert_cmpuint (rule->arg_lens[0], ==, 3 | DBUS_MATCH_ARG_NAMESPACE);
  g_assert_cmpstr (rule->args[1], ==, "a");
  g_assert_cmpuint (rule->arg_lens[1], ==, 1);
  g_assert_null (rule->args[2]);
  g_assert_cmpstr (rule->args[3], ==, "");
  g_assert_cmpuint (rule->arg_lens[3], ==, 0);
  g_assert_null (rule->args[4]);
  g_assert_cmpstr (rule->args[5], ==, "/b/");
  g_assert_cmpuint (rule->arg_lens[5], ==, 3 | DBUS_MATCH_ARG_IS_PATH);
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("arg7path='/foo'");
  g_assert_cmpint (rule->args_len, ==, 8);
  g_assert_cmpuint (rule->arg_lens[7], ==, 4 | DBUS_MATCH_ARG_IS_PATH);
  _dbus_match_rule_unref (rule);

  /* argNpath values are not validated, as in dbus-daemon */
  rule = parse_ok ("arg0path='not a path'");
  g_assert_cmpstr (rule->args[0], ==, "not a path");
  _dbus_match_rule_unref (rule);

  /* the argument number is read by strtoul() with base 0, as in
   * dbus-daemon: hexadecimal, octal and a sign are accepted */
  rule = parse_ok ("arg0x3f='hex'");
  g_assert_cmpint (rule->args_len, ==, 64);
  g_assert_cmpstr (rule->args[63], ==, "hex");
  _dbus_match_rule_unref (rule);
  rule = parse_ok ("arg010='octal'");
  g_assert_cmpint (rule->args_len, ==, 9);
  g_assert_cmpstr (rule->args[8], ==, "octal");
  _dbus_match_rule_unref (rule);
  rule = parse_ok ("arg+1path='/'");
  g_assert_cmpint (rule->args_len, ==, 2);
  g_assert_cmpuint (rule->arg_lens[1], ==, 1 | DBUS_MATCH_ARG_IS_PATH);
  _dbus_match_rule_unref (rule);
}

/* Quoting, escaping and whitespace: each rule sets arg0 to the value */
static const struct
{
  const char *text;
  const char *value;
} quoting_cases[] = {
  { "arg0=foo", "foo" },
  { "arg0='foo'", "foo" },
  { "  arg0 \t = 'foo'", " foo" },
  { "\targ0='foo',  \n", "foo" },
  { "arg0=fo'o'", "foo" },
  { "arg0='f''o''o'''''", "foo" },
  { "arg0=", "" },
  { "arg0=''", "" },
  { "arg0=,", "" },
  /* whitespace in a value, even unquoted, is part of it */
  { "arg0= foo ", " foo " },
  { "arg0='a b'  ", "a b  " },
  /* commas in quotes */
  { "arg0='comma,type=comma'", "comma,type=comma" },
  /* \' is an apostrophe outside quotes, other backslashes are literal */
  { "arg0=Time: 8 o\\'clock", "Time: 8 o'clock" },
  { "arg0='Time: 8 o'\\''clock'", "Time: 8 o'clock" },
  { "arg0=escap\\e", "escap\\e" },
  { "arg0='escap\\e'", "escap\\e" },
  { "arg0=a\\\\b", "a\\\\b" },
  { "arg0='back\\'", "back\\" },
  { "arg0=end\\", "end\\" },
  { "arg0=\\", "\\" },
  { "arg0=\\,", "\\," },
  { "arg0=''''", "" },
  { "arg0='\"'", "\"" },
  { "arg0=a=b", "a=b" },
  { "arg0='é'", "é" },
};

static void
test_parse_quoting (void)
{
  gsize i;

  for (i = 0; i < G_N_ELEMENTS (quoting_cases); i++)
    {
      DBusMatchRule *rule;

      g_test_message ("%s", quoting_cases[i].text);
      rule = parse_ok (quoting_cases[i].text);
      g_assert_cmpuint (rule->flags, ==, DBUS_MATCH_ARGS);
      g_assert_cmpint (rule->args_len, ==, 1);
      g_assert_cmpstr (rule->args[0], ==, quoting_cases[i].value);
      g_assert_cmpuint (rule->arg_lens[0], ==, strlen (quoting_cases[i].value));
      _dbus_match_rule_unref (rule);
    }
}

/* Rules and whether dbus-daemon 1.14.10 accepts them (NULL) or with which
 * error it rejects them.  Checked against dbus-daemon by
 * /match-rule/daemon/parse. */
static const struct
{
  const char *text;
  const char *error;
} parse_cases[] = {
  /* empty and whitespace-only rules match everything */
  { "", NULL },
  { "    \t\n\r", NULL },
  { "type='signal',sender='org.freedes''ktop.DBusSender',"
    "   interface='org.freedesktop.DBusInterface''''', \tmember='Foo',"
    "path='/bar/foo',destination=':452345.34'''''", NULL },
  /* key without '=' */
  { "type", DBUS_ERROR_MATCH_RULE_INVALID },
  { "type ", DBUS_ERROR_MATCH_RULE_INVALID },
  { "type='signal',member", DBUS_ERROR_MATCH_RULE_INVALID },
  { "type='signal',,member='Foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { ",", DBUS_ERROR_MATCH_RULE_INVALID },
  { "type 'signal'", DBUS_ERROR_MATCH_RULE_INVALID },
  /* unbalanced quotes */
  { "type='signal", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0='foo''", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0=foo',member='Foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0='\\''", DBUS_ERROR_MATCH_RULE_INVALID },
  /* \' is an apostrophe, then "x" is a key without '=' */
  { "arg0=\\',x", DBUS_ERROR_MATCH_RULE_INVALID },
  /* unknown keys, and keys are case-sensitive */
  { "blah='signal'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "service='youpi'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "Type='signal'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "eavesdropping='true'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "pathnamespace='/'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0namespacee='a'", DBUS_ERROR_MATCH_RULE_INVALID },
  /* duplicates */
  { "type='signal',type='method_call'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "type='signal',type='signal'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "sender='a.b',sender='a.b'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "interface='a.b',interface='a.c'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "member='A',member='B'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "destination=':1.1',destination=':1.1'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "path='/a',path='/a'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "path_namespace='/a',path_namespace='/b'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "path='/foo',path_namespace='/foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "path_namespace='/foo',path='/foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0='foo',arg0='bar'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg3='foo',arg3path='/bar'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0path='/foo',arg0namespace='bar'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg30='foo',arg30='bar'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg1='foo',arg01='bar'", DBUS_ERROR_MATCH_RULE_INVALID },
  /* type values */
  { "type='chouin'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "type=''", DBUS_ERROR_MATCH_RULE_INVALID },
  { "type='Signal'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "type='signal '", DBUS_ERROR_MATCH_RULE_INVALID },
  { "type= signal", DBUS_ERROR_MATCH_RULE_INVALID },
  { "type='invalid'", DBUS_ERROR_MATCH_RULE_INVALID },
  /* names */
  { "sender=''", DBUS_ERROR_MATCH_RULE_INVALID },
  { "sender='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "sender='a..b'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "sender='a.1b'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "sender=':1.1b'", NULL },
  { "sender='a.b-c'", NULL },
  { "sender='a.b.'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "destination='x'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "destination=':1'", NULL },
  { "destination='com.example'", NULL },
  { "interface='abc@def++'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "interface='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "interface='a.b-c'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "interface=':1.2'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "interface='a._b'", NULL },
  { "member='Foo.Bar'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "member=''", DBUS_ERROR_MATCH_RULE_INVALID },
  { "member='1Foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "member='_Foo1'", NULL },
  /* paths */
  { "path=''", DBUS_ERROR_MATCH_RULE_INVALID },
  { "path='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "path='/foo/'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "path='/foo//bar'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "path='/foo-bar'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "path='/'", NULL },
  { "path_namespace='/foo/'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "path_namespace=''", DBUS_ERROR_MATCH_RULE_INVALID },
  { "path_namespace='/'", NULL },
  /* eavesdrop */
  { "eavesdrop='yes'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "eavesdrop='TRUE'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "eavesdrop=''", DBUS_ERROR_MATCH_RULE_INVALID },
  { "eavesdrop='true',eavesdrop='false'", NULL },
  /* argN */
  { "arg='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "argv='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "argument='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg3junk='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0paths='/foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0Path='/foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "argpath='/foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg64='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg300='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg64path='/'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg-1='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg99999999999999999999999='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg63='foo'", NULL },
  { "arg63path='/foo/'", NULL },
  { "arg0x3f='foo'", NULL },
  { "arg0x40='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg010='foo'", NULL },
  { "arg08='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg+2='foo'", NULL },
  { "arg0path=''", NULL },
  /* arg0namespace */
  { "arg0namespace='foo'", NULL },
  { "arg0namespace='foo.bar'", NULL },
  { "arg0namespace='foo-bar.baz'", NULL },
  { "arg0namespace=':1.2'", NULL },
  { "arg0namespace=''", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0namespace='foo.'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0namespace='foo.bar.'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0namespace='foo..'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0namespace='foo..bar'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0namespace='1foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg0namespace='foo/bar'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg1namespace='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  { "arg00namespace='foo'", DBUS_ERROR_MATCH_RULE_INVALID },
  /* an empty key ends the rule: the rest is not read, not even checked */
  { "=foo", NULL },
  { "type='signal',=foo,type='bogus'", NULL },
  { "type='signal', =' ,blah=x", NULL },
  /* only the first 16 pairs count: the 17th is not even checked */
  { "arg0=a,arg1=a,arg2=a,arg3=a,arg4=a,arg5=a,arg6=a,arg7=a,arg8=a,"
    "arg9=a,arg10=a,arg11=a,arg12=a,arg13=a,arg14=a,arg15=a,"
    "bogus", NULL },
  { "arg0=a,arg1=a,arg2=a,arg3=a,arg4=a,arg5=a,arg6=a,arg7=a,arg8=a,"
    "arg9=a,arg10=a,arg11=a,arg12=a,arg13=a,arg14=a,bogus=a", DBUS_ERROR_MATCH_RULE_INVALID },
  { "eavesdrop=true,eavesdrop=true,eavesdrop=true,eavesdrop=true,"
    "eavesdrop=true,eavesdrop=true,eavesdrop=true,eavesdrop=true,"
    "eavesdrop=true,eavesdrop=true,eavesdrop=true,eavesdrop=true,"
    "eavesdrop=true,eavesdrop=true,eavesdrop=true,eavesdrop=true,"
    "type='bogus'", NULL },
};

/* Longest rule accepted: DBUS_MAXIMUM_MATCH_RULE_LENGTH bytes */
static gchar *
long_rule (int len)
{
  GString *s = g_string_new ("arg0='");

  while ((int) s->len < len - 1)
    g_string_append_c (s, 'x');

  g_string_append_c (s, '\'');
  g_assert_cmpint (s->len, ==, len);
  return g_string_free (s, FALSE);
}

static void
test_parse_errors (void)
{
  gsize i;
  gchar *text;
  DBusMatchRule *rule;
  DBusError error = DBUS_ERROR_INIT;

  for (i = 0; i < G_N_ELEMENTS (parse_cases); i++)
    {
      g_test_message ("%s", parse_cases[i].text);
      rule = parse (parse_cases[i].text, &error);

      if (parse_cases[i].error == NULL)
        {
          if (rule == NULL)
            g_error ("\"%s\" failed: %s", parse_cases[i].text, error.message);

          _dbus_match_rule_unref (rule);
        }
      else
        {
          if (rule != NULL)
            g_error ("\"%s\" was accepted", parse_cases[i].text);

          g_assert_cmpstr (error.name, ==, parse_cases[i].error);
          g_assert_nonnull (error.message);
          g_test_message ("-> %s", error.message);
          dbus_error_free (&error);
        }
    }

  text = long_rule (DBUS_MAXIMUM_MATCH_RULE_LENGTH);
  rule = parse_ok (text);
  g_assert_cmpuint (rule->arg_lens[0], ==,
                    DBUS_MAXIMUM_MATCH_RULE_LENGTH - strlen ("arg0=''"));
  _dbus_match_rule_unref (rule);
  g_free (text);

  /* too long: dbus-daemon says LimitsExceeded, not MatchRuleInvalid */
  text = long_rule (DBUS_MAXIMUM_MATCH_RULE_LENGTH + 1);
  g_assert_null (parse (text, &error));
  g_assert_cmpstr (error.name, ==, DBUS_ERROR_LIMITS_EXCEEDED);
  dbus_error_free (&error);
  g_free (text);
}

/* What the truncation quirks leave in the rule */
static void
test_parse_quirks (void)
{
  DBusMatchRule *rule;

  rule = parse_ok ("type='signal',=foo,type='bogus'");
  g_assert_cmpuint (rule->flags, ==, DBUS_MATCH_MESSAGE_TYPE);
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("arg0=a,arg1=a,arg2=a,arg3=a,arg4=a,arg5=a,arg6=a,"
                   "arg7=a,arg8=a,arg9=a,arg10=a,arg11=a,arg12=a,arg13=a,"
                   "arg14=a,arg15=a,arg16=a,member='Foo'");
  g_assert_cmpuint (rule->flags, ==, DBUS_MATCH_ARGS);
  g_assert_cmpint (rule->args_len, ==, 16);
  g_assert_null (rule->member);
  _dbus_match_rule_unref (rule);

  /* a nul byte ends the text, as in dbus-daemon's C string */
  {
    static const char with_nul[] = "type='signal'\0member='x'";
    DBusString str;
    DBusError error = DBUS_ERROR_INIT;

    _dbus_string_init_const_len (&str, with_nul, sizeof (with_nul) - 1);
    rule = _dbus_match_rule_parse (&str, &error);
    g_assert_nonnull (rule);
    g_assert_cmpuint (rule->flags, ==, DBUS_MATCH_MESSAGE_TYPE);
    _dbus_match_rule_unref (rule);
  }
}

static void
test_ref (void)
{
  DBusMatchRule *rule;

  rule = parse_ok ("arg2='x',member='Foo'");
  g_assert_true (_dbus_match_rule_ref (rule) == rule);
  g_assert_cmpint (rule->refcount, ==, 2);
  _dbus_match_rule_unref (rule);
  g_assert_cmpint (rule->refcount, ==, 1);
  g_assert_cmpstr (rule->member, ==, "Foo");
  _dbus_match_rule_unref (rule);
}

/* ---- out of memory ---- */

/* Parses every rule of the tables; with allocations failing, a rule
 * either parses as it does with memory, or fails with NoMemory (or its
 * usual error), and nothing leaks (oom_loop_run checks) */
static dbus_bool_t
parse_all (void        *data,
           dbus_bool_t  have_memory)
{
  gsize i;

  for (i = 0; i < G_N_ELEMENTS (parse_cases) + G_N_ELEMENTS (quoting_cases); i++)
    {
      DBusError error = DBUS_ERROR_INIT;
      DBusMatchRule *rule;
      const char *text;
      const char *expected_error;

      if (i < G_N_ELEMENTS (parse_cases))
        {
          text = parse_cases[i].text;
          expected_error = parse_cases[i].error;
        }
      else
        {
          text = quoting_cases[i - G_N_ELEMENTS (parse_cases)].text;
          expected_error = NULL;
        }

      rule = parse (text, &error);

      if (rule != NULL)
        {
          g_assert_null (expected_error);
          _dbus_match_rule_unref (rule);
        }
      else if (have_memory || !dbus_error_has_name (&error, DBUS_ERROR_NO_MEMORY))
        {
          if (g_strcmp0 (error.name, expected_error) != 0)
            g_error ("\"%s\": %s", text, error.message);
          dbus_error_free (&error);
        }
      else
        {
          dbus_error_free (&error);
        }
    }

  return TRUE;
}

static void
test_oom (void)
{
  oom_loop_run ("parse", parse_all, NULL);
}

/* ---- equality (RemoveMatch) ---- */

static const struct
{
  const char *a;
  const char *b;
  gboolean equal;
} equality_cases[] = {
  { "type='signal'", "type='signal'", TRUE },
  { "type='signal',interface='foo.bar'", "interface='foo.bar',type='signal'", TRUE },
  { "type='signal',member='bar'", "member='bar',type='signal'", TRUE },
  { "type='method_call',sender=':1.0'", "sender=':1.0',type='method_call'", TRUE },
  { "type='method_call',destination=':1.0'", "destination=':1.0',type='method_call'", TRUE },
  { "type='method_call',path='/foo/bar'", "path='/foo/bar',type='method_call'", TRUE },
  { "type='method_call',arg0='blah'", "arg0='blah',type='method_call'", TRUE },
  { "arg0='blah',arg1='baz'", "arg1='baz',arg0='blah'", TRUE },
  { "arg3='fool'", "arg3='fool'", TRUE },
  { "arg0namespace='fool'", "arg0namespace='fool'", TRUE },
  { "member=escape", "member='escape'", TRUE },
  { "member=icecream", "member=ice'cream'", TRUE },
  { "arg0='comma,type=comma',type=signal", "type=signal,arg0='comma,type=comma'", TRUE },
  { "arg0=escap\\e", "arg0='escap\\e'", TRUE },
  { "arg0=Time: 8 o\\'clock", "arg0='Time: 8 o'\\''clock'", TRUE },
  { "", "   ", TRUE },
  { "eavesdrop=false", "", TRUE },
  { "eavesdrop=true,eavesdrop=false,member=A", "member=A", TRUE },

  { "type='signal'", "type='method_call'", FALSE },
  { "type='signal'", "", FALSE },
  { "type='signal'", "type='signal',eavesdrop=true", FALSE },
  { "member='foo'", "interface='foo.bar'", FALSE },
  { "member='foo'", "member='bar'", FALSE },
  { "sender='a.b'", "sender='a.c'", FALSE },
  { "sender='a.b'", "destination='a.b'", FALSE },
  { "destination=':1.1'", "destination=':1.2'", FALSE },
  { "interface='a.b'", "interface='a.c'", FALSE },
  { "path='/foo'", "path_namespace='/foo'", FALSE },
  { "path='/foo'", "path='/bar'", FALSE },
  /* dbus-daemon 1.14 does not compare path_namespace values in RemoveMatch */
  { "path_namespace='/foo'", "path_namespace='/bar'", TRUE },
  { "path_namespace='/foo',member=A", "path_namespace='/',member=A", TRUE },
  { "path_namespace='/foo',member=A", "path_namespace='/foo',member=B", FALSE },
  { "arg0='foo'", "arg0='bar'", FALSE },
  { "arg0='foo'", "arg0='fo'", FALSE },
  { "arg0='foo'", "arg1='foo'", FALSE },
  { "arg0='foo'", "arg0path='foo'", FALSE },
  { "arg0='foo'", "arg0namespace='foo'", FALSE },
  { "arg0path='/foo/'", "arg0namespace='foo'", FALSE },
  { "arg0='foo'", "arg0='foo',arg1='bar'", FALSE },
  { "arg1='foo'", "arg1='foo',arg3='bar'", FALSE },
  { "arg0='foo',arg2='x'", "arg1='foo',arg2='x'", FALSE },
  { "arg0=''", "", FALSE },
};

static void
test_equal (void)
{
  gsize i;

  for (i = 0; i < G_N_ELEMENTS (equality_cases); i++)
    {
      DBusMatchRule *a, *b;

      g_test_message ("\"%s\" vs \"%s\"", equality_cases[i].a,
                      equality_cases[i].b);
      a = parse_ok (equality_cases[i].a);
      b = parse_ok (equality_cases[i].b);
      g_assert_cmpint (_dbus_match_rule_equal (a, a), ==, TRUE);
      g_assert_cmpint (_dbus_match_rule_equal (a, b), ==,
                       equality_cases[i].equal);
      g_assert_cmpint (_dbus_match_rule_equal (b, a), ==,
                       equality_cases[i].equal);
      _dbus_match_rule_unref (a);
      _dbus_match_rule_unref (b);
    }
}

/* ---- matching ---- */

/* A message; destination may use @O, @R; args are "t:value" items
 * separated by '|' with t one of s (string), o (object path),
 * g (signature), i (int32). */
typedef struct
{
  const char *id;
  int type;
  const char *destination;
  const char *path;
  const char *interface;
  const char *member;
  const char *args;
  /* FALSE if it cannot be sent through dbus-daemon from a client
   * (replies and errors without a call, what the bus itself sends,
   * messages to the receiver itself) */
  gboolean sendable;
} MessageSpec;

#define SIG DBUS_MESSAGE_TYPE_SIGNAL
#define CALL DBUS_MESSAGE_TYPE_METHOD_CALL
#define IFACE "com.example.Iface"

static const MessageSpec messages[] = {
  { "sig", SIG, NULL, "/com/example/a/b", IFACE, "Changed", "", TRUE },
  { "sig-root", SIG, NULL, "/", IFACE, "Changed", "", TRUE },
  { "sig-ab", SIG, NULL, "/com/example/ab", IFACE, "Changed", "", TRUE },
  { "sig-a", SIG, NULL, "/com/example/a", IFACE, "Changed", "", TRUE },
  { "sig-other-iface", SIG, NULL, "/com/example/a/b", "com.example.Iface2",
    "Changed", "", TRUE },
  { "sig-args", SIG, NULL, "/com/example/a/b", IFACE, "Args",
    "s:/aa/bb|o:/aa/bb/cc|s:com.example.Foo.Bar|i:42|s:|g:s|o:/", TRUE },
  { "sig-ns", SIG, NULL, "/x", IFACE, "NS", "s:com.example.Foo", TRUE },
  { "sig-ns-sub", SIG, NULL, "/x", IFACE, "NS", "s:com.example.Foo.Bar", TRUE },
  { "sig-ns-long", SIG, NULL, "/x", IFACE, "NS", "s:com.example.Foobar", TRUE },
  { "sig-ns-short", SIG, NULL, "/x", IFACE, "NS", "s:com.example", TRUE },
  { "sig-ns-path", SIG, NULL, "/x", IFACE, "NS", "o:/com/example/Foo", TRUE },
  { "sig-ns-unique", SIG, NULL, "/x", IFACE, "NS", "s::1.23", TRUE },
  { "sig-path-slash", SIG, NULL, "/x", IFACE, "P", "s:/aa/", TRUE },
  { "sig-path-obj-slash", SIG, NULL, "/x", IFACE, "P", "o:/", TRUE },
  { "sig-empty-str", SIG, NULL, "/x", IFACE, "P", "s:", TRUE },
  { "sig-to-other", SIG, "@O", "/com/example/a", IFACE, "Unicast", "s:hi", TRUE },
  { "call-to-other", CALL, "@O", "/com/example/a", IFACE, "Do", "s:hi", TRUE },
  { "call-to-other-wk", CALL, OTHER_NAME, "/com/example/a", IFACE, "Do", "s:hi", TRUE },
  { "call-no-iface", CALL, "@O", "/com/example/a", NULL, "Do", "", TRUE },
  { "call-to-bus", CALL, DBUS_SERVICE_DBUS, DBUS_PATH_DBUS, DBUS_INTERFACE_PEER,
    "Ping", "", TRUE },
  { "sig-to-receiver", SIG, "@R", "/com/example/a", IFACE, "Unicast", "", FALSE },
  { "call-to-receiver", CALL, "@R", "/com/example/a", IFACE, "Do", "", FALSE },
  { "return-to-other", DBUS_MESSAGE_TYPE_METHOD_RETURN, "@O", NULL, NULL, NULL,
    "s:ok", FALSE },
  { "error-to-other", DBUS_MESSAGE_TYPE_ERROR, "@O", NULL, NULL, NULL,
    "s:bad", FALSE },
  { "sig-from-bus", SIG, NULL, DBUS_PATH_DBUS, DBUS_INTERFACE_DBUS,
    "NameOwnerChanged", "s:com.example.X|s:|s::1.42", FALSE },
};

/* (rule, message) -> whether _dbus_match_rule_matches() is TRUE, with
 * the owners of SENDER_NAME and OTHER_NAME known (the daemon's Owners
 * signal), and what dbus-daemon does: 1 delivers, 0 does not, -1 not
 * checkable (the message cannot be sent by a client, see MessageSpec).
 * Where the two differ it is a documented limit of what libdbus can tell
 * alone (who owns the well-known name in a destination= key), which the
 * kernel filter covers. */
typedef struct
{
  const char *rule;
  const char *message;
  gboolean libdbus;
  int daemon;
} MatchCase;

static const MatchCase match_cases[] = {
  /* empty rule: every broadcast, no unicast */
  { "", "sig", TRUE, 1 },
  { "", "sig-args", TRUE, 1 },
  { "", "sig-to-other", FALSE, 0 },
  { "", "call-to-other", FALSE, 0 },
  { "", "sig-to-receiver", FALSE, -1 },
  { "", "sig-from-bus", TRUE, -1 },

  /* type */
  { "type='signal'", "sig", TRUE, 1 },
  { "type='method_call'", "sig", FALSE, 0 },
  { "type='method_call',eavesdrop=true", "call-to-other", TRUE, 1 },
  { "type='signal',eavesdrop=true", "call-to-other", FALSE, 0 },
  { "type='method_return',eavesdrop=true", "return-to-other", TRUE, -1 },
  { "type='error',eavesdrop=true", "return-to-other", FALSE, -1 },
  { "type='error',eavesdrop=true", "error-to-other", TRUE, -1 },
  { "type='method_return'", "return-to-other", FALSE, -1 },

  /* interface, member */
  { "interface='" IFACE "'", "sig", TRUE, 1 },
  { "interface='" IFACE "'", "sig-other-iface", FALSE, 0 },
  { "interface='com.example'", "sig", FALSE, 0 },
  { "interface='" IFACE "',eavesdrop=true", "call-no-iface", FALSE, 0 },
  { "member='Changed'", "sig", TRUE, 1 },
  { "member='Change'", "sig", FALSE, 0 },
  { "member='Do',eavesdrop=true", "call-no-iface", TRUE, 1 },
  { "member='Changed',interface='" IFACE "',type='signal'", "sig", TRUE, 1 },
  { "member='Changed',interface='" IFACE "',type='signal'", "sig-other-iface",
    FALSE, 0 },
  { "member='NameOwnerChanged'", "sig-from-bus", TRUE, -1 },

  /* sender: unique names compared, well-known names through their
   * owners, org.freedesktop.DBus is the bus */
  { "sender='@S'", "sig", TRUE, 1 },
  { "sender='@O'", "sig", FALSE, 0 },
  { "sender=':1.999999'", "sig", FALSE, 0 },
  { "sender='" SENDER_NAME "'", "sig", TRUE, 1 },
  { "sender='" OTHER_NAME "'", "sig", FALSE, 0 },
  { "sender='com.example.Nobody'", "sig", FALSE, 0 },
  { "sender='org.freedesktop.DBus'", "sig", FALSE, 0 },
  { "sender='org.freedesktop.DBus'", "sig-from-bus", TRUE, -1 },
  { "sender='@S'", "sig-from-bus", FALSE, -1 },
  { "sender='@S',eavesdrop=true", "call-to-other", TRUE, 1 },

  /* destination: only for eavesdroppers, unicasts only */
  { "destination='@O'", "sig", FALSE, 0 },
  { "destination='@O'", "sig-to-other", FALSE, 0 },
  { "destination='@O',eavesdrop=true", "sig", FALSE, 0 },
  { "destination='@O',eavesdrop=true", "sig-to-other", TRUE, 1 },
  { "destination='@O',eavesdrop=true", "call-to-other", TRUE, 1 },
  { "destination='@S',eavesdrop=true", "call-to-other", FALSE, 0 },
  { "destination='@R',eavesdrop=true", "call-to-other", FALSE, 0 },
  { "destination='@O',eavesdrop=true", "call-to-other-wk", TRUE, 1 },
  { "destination='@S',eavesdrop=true", "call-to-other-wk", TRUE, 0 },
  { "destination='" OTHER_NAME "',eavesdrop=true", "call-to-other-wk", TRUE, 1 },
  { "destination='" OTHER_NAME "',eavesdrop=true", "call-to-other", TRUE, 1 },
  { "destination='" SENDER_NAME "',eavesdrop=true", "call-to-other", TRUE, 0 },
  { "destination='" SENDER_NAME "',eavesdrop=true", "call-to-other-wk", TRUE, 0 },
  { "destination='org.freedesktop.DBus',eavesdrop=true", "call-to-bus", TRUE, 1 },
  { "destination='org.freedesktop.DBus',eavesdrop=true", "call-to-other", FALSE, 0 },
  { "destination='@O',eavesdrop=true", "call-to-bus", FALSE, 0 },
  { "destination='" OTHER_NAME "',eavesdrop=true", "call-to-bus", FALSE, 0 },
  /* ... and against the receiver itself (dbus-daemon delivers these to it
   * as the addressed recipient whatever the rules) */
  { "destination='@R'", "sig-to-receiver", FALSE, -1 },
  { "destination='@R',eavesdrop=true", "sig-to-receiver", TRUE, -1 },
  { "destination='@R',eavesdrop=true", "sig", FALSE, 0 },
  { "destination='@R',eavesdrop=true", "call-to-other-wk", FALSE, 0 },
  { "destination='@O',eavesdrop=true", "call-to-receiver", FALSE, -1 },
  { "eavesdrop=true", "call-to-receiver", TRUE, -1 },
  { "type='method_call'", "call-to-receiver", FALSE, -1 },

  /* eavesdrop: everything else the keys allow */
  { "eavesdrop=true", "sig", TRUE, 1 },
  { "eavesdrop=true", "sig-to-other", TRUE, 1 },
  { "eavesdrop=true", "call-to-other", TRUE, 1 },
  { "eavesdrop=true", "call-to-other-wk", TRUE, 1 },
  { "eavesdrop=true", "call-to-bus", TRUE, 1 },
  { "eavesdrop=false", "call-to-other", FALSE, 0 },
  { "eavesdrop=true,eavesdrop=false", "call-to-other", FALSE, 0 },
  { "eavesdrop=true,member='Unicast'", "sig-to-other", TRUE, 1 },
  { "eavesdrop=true,member='Other'", "sig-to-other", FALSE, 0 },

  /* path */
  { "path='/com/example/a/b'", "sig", TRUE, 1 },
  { "path='/com/example/a'", "sig", FALSE, 0 },
  { "path='/com/example/a/b/c'", "sig", FALSE, 0 },
  { "path='/'", "sig-root", TRUE, 1 },
  { "path='/'", "sig", FALSE, 0 },
  { "path='/com/example/a/b'", "return-to-other", FALSE, -1 },

  /* path_namespace */
  { "path_namespace='/com/example/a'", "sig", TRUE, 1 },
  { "path_namespace='/com/example/a'", "sig-a", TRUE, 1 },
  { "path_namespace='/com/example/a'", "sig-ab", FALSE, 0 },
  { "path_namespace='/com/example/a/b'", "sig", TRUE, 1 },
  { "path_namespace='/com/example/a/b'", "sig-a", FALSE, 0 },
  { "path_namespace='/com'", "sig", TRUE, 1 },
  { "path_namespace='/co'", "sig", FALSE, 0 },
  { "path_namespace='/'", "sig", TRUE, 1 },
  { "path_namespace='/'", "sig-root", TRUE, 1 },
  { "path_namespace='/com'", "sig-root", FALSE, 0 },
  { "path_namespace='/',eavesdrop=true", "error-to-other", FALSE, -1 },

  /* argN: strings only */
  { "arg0='/aa/bb'", "sig-args", TRUE, 1 },
  { "arg0='/aa/b'", "sig-args", FALSE, 0 },
  { "arg0='/aa/bb/'", "sig-args", FALSE, 0 },
  { "arg1='/aa/bb/cc'", "sig-args", FALSE, 0 },
  { "arg2='com.example.Foo.Bar'", "sig-args", TRUE, 1 },
  { "arg3='42'", "sig-args", FALSE, 0 },
  { "arg4=''", "sig-args", TRUE, 1 },
  { "arg4='x'", "sig-args", FALSE, 0 },
  { "arg5='s'", "sig-args", FALSE, 0 },
  { "arg7=''", "sig-args", FALSE, 0 },
  { "arg63=''", "sig-args", FALSE, 0 },
  { "arg0='/aa/bb',arg2='com.example.Foo.Bar',arg4=''", "sig-args", TRUE, 1 },
  { "arg0='/aa/bb',arg2='com.example.Foo.Baz'", "sig-args", FALSE, 0 },
  { "arg0=''", "sig", FALSE, 0 },
  { "arg0='hi'", "sig-to-other", FALSE, 0 },
  { "arg0='hi',eavesdrop=true", "sig-to-other", TRUE, 1 },
  { "arg0='ok',eavesdrop=true", "return-to-other", TRUE, -1 },

  /* argNpath: strings and object paths, equal or a prefix ending in '/' */
  { "arg0path='/aa/bb'", "sig-args", TRUE, 1 },
  { "arg0path='/aa/'", "sig-args", TRUE, 1 },
  { "arg0path='/'", "sig-args", TRUE, 1 },
  { "arg0path='/aa'", "sig-args", FALSE, 0 },
  { "arg0path='/aa/b'", "sig-args", FALSE, 0 },
  { "arg0path='/aa/bb/'", "sig-args", FALSE, 0 },
  { "arg0path='/aa/bb/cc'", "sig-args", FALSE, 0 },
  { "arg0path='/aa/bc'", "sig-args", FALSE, 0 },
  { "arg1path='/aa/bb/cc'", "sig-args", TRUE, 1 },
  { "arg1path='/aa/bb/'", "sig-args", TRUE, 1 },
  { "arg1path='/aa/bb/cc/dd'", "sig-args", FALSE, 0 },
  { "arg1path='/aa/bb/cc/'", "sig-args", FALSE, 0 },
  { "arg6path='/'", "sig-args", TRUE, 1 },
  { "arg6path='/aa/'", "sig-args", TRUE, 1 },
  { "arg6path='/aa'", "sig-args", TRUE, 1 },
  { "arg2path='com.example.Foo.Bar'", "sig-args", TRUE, 1 },
  { "arg3path='42'", "sig-args", FALSE, 0 },
  { "arg5path='s'", "sig-args", FALSE, 0 },
  { "arg0path='/aa/bb/cc'", "sig-path-slash", TRUE, 1 },
  { "arg0path='/aa/'", "sig-path-slash", TRUE, 1 },
  { "arg0path='/aa'", "sig-path-slash", FALSE, 0 },
  { "arg0path='/ab/'", "sig-path-slash", FALSE, 0 },
  { "arg0path='/anything'", "sig-path-obj-slash", TRUE, 1 },
  { "arg0path=''", "sig-empty-str", TRUE, 1 },
  { "arg0path='/aa/'", "sig-empty-str", FALSE, 0 },
  { "arg0path=''", "sig-path-slash", FALSE, 0 },
  { "arg0path='/'", "sig", FALSE, 0 },

  /* arg0namespace */
  { "arg0namespace='com.example.Foo'", "sig-ns", TRUE, 1 },
  { "arg0namespace='com.example.Foo'", "sig-ns-sub", TRUE, 1 },
  { "arg0namespace='com.example'", "sig-ns-sub", TRUE, 1 },
  { "arg0namespace='com'", "sig-ns-sub", TRUE, 1 },
  { "arg0namespace='com.example.Foo'", "sig-ns-long", FALSE, 0 },
  { "arg0namespace='com.example.Foo'", "sig-ns-short", FALSE, 0 },
  { "arg0namespace='com.example.Foo.Bar.Baz'", "sig-ns-sub", FALSE, 0 },
  { "arg0namespace='com.example.Fo'", "sig-ns", FALSE, 0 },
  { "arg0namespace='com.example.Foo'", "sig-ns-path", FALSE, 0 },
  { "arg0namespace=':1.23'", "sig-ns-unique", TRUE, 1 },
  { "arg0namespace=':1'", "sig-ns-unique", TRUE, 1 },
  { "arg0namespace='com.example.Foo'", "sig", FALSE, 0 },

  /* several keys: all must match */
  { "type='signal',sender='@S',interface='" IFACE "',member='Args',"
    "path='/com/example/a/b',arg0path='/aa/',arg2='com.example.Foo.Bar'",
    "sig-args", TRUE, 1 },
  { "type='signal',sender='@S',interface='" IFACE "',member='Args',"
    "path='/com/example/a/b',arg0path='/aa/',arg2='com.example.Foo.Baz'",
    "sig-args", FALSE, 0 },
  { "type='method_call',sender='@S',destination='@O',path_namespace='/com',"
    "interface='" IFACE "',member='Do',arg0='hi',eavesdrop=true",
    "call-to-other", TRUE, 1 },
  { "type='method_call',sender='@S',destination='@O',path_namespace='/com',"
    "interface='" IFACE "',member='Do',arg0='hi'",
    "call-to-other", FALSE, 0 },
  /* the ignored 17th key does not restrict the match */
  { "eavesdrop=false,eavesdrop=false,eavesdrop=false,eavesdrop=false,"
    "eavesdrop=false,eavesdrop=false,eavesdrop=false,eavesdrop=false,"
    "eavesdrop=false,eavesdrop=false,eavesdrop=false,eavesdrop=false,"
    "eavesdrop=false,eavesdrop=false,eavesdrop=false,type='signal',"
    "member='Nothing'", "sig", TRUE, 1 },
};

static const MessageSpec *
find_message (const char *id)
{
  gsize i;

  for (i = 0; i < G_N_ELEMENTS (messages); i++)
    {
      if (strcmp (messages[i].id, id) == 0)
        return &messages[i];
    }

  g_error ("no message \"%s\"", id);
  return NULL;
}

static void
append_args (DBusMessage *message,
             const char  *args)
{
  DBusMessageIter iter;
  gchar **items;
  gsize i;

  if (args[0] == '\0')
    return;

  dbus_message_iter_init_append (message, &iter);
  items = g_strsplit (args, "|", -1);

  for (i = 0; items[i] != NULL; i++)
    {
      const char *value = items[i] + 2;
      dbus_int32_t n;
      dbus_bool_t ok;

      g_assert_cmpint (items[i][1], ==, ':');

      switch (items[i][0])
        {
        case 's':
          ok = dbus_message_iter_append_basic (&iter, DBUS_TYPE_STRING, &value);
          break;
        case 'o':
          ok = dbus_message_iter_append_basic (&iter, DBUS_TYPE_OBJECT_PATH,
                                               &value);
          break;
        case 'g':
          ok = dbus_message_iter_append_basic (&iter, DBUS_TYPE_SIGNATURE,
                                               &value);
          break;
        case 'i':
          n = atoi (value);
          ok = dbus_message_iter_append_basic (&iter, DBUS_TYPE_INT32, &n);
          break;
        default:
          g_assert_not_reached ();
        }

      g_assert_true (ok);
    }

  g_strfreev (items);
}

static DBusMessage *
build_message (const MessageSpec *spec,
               const Names       *names)
{
  DBusMessage *message;

  message = dbus_message_new (spec->type);
  g_assert_nonnull (message);

  if (spec->destination != NULL)
    {
      gchar *d = expand (spec->destination, names);

      g_assert_true (dbus_message_set_destination (message, d));
      g_free (d);
    }

  if (spec->type == DBUS_MESSAGE_TYPE_METHOD_RETURN ||
      spec->type == DBUS_MESSAGE_TYPE_ERROR)
    g_assert_true (dbus_message_set_reply_serial (message, 12345));

  if (spec->type == DBUS_MESSAGE_TYPE_ERROR)
    g_assert_true (dbus_message_set_error_name (message,
                                                "com.example.Error.Bad"));

  if (spec->path != NULL)
    g_assert_true (dbus_message_set_path (message, spec->path));

  if (spec->interface != NULL)
    g_assert_true (dbus_message_set_interface (message, spec->interface));

  if (spec->member != NULL)
    g_assert_true (dbus_message_set_member (message, spec->member));

  if (spec->type == DBUS_MESSAGE_TYPE_METHOD_CALL)
    dbus_message_set_no_reply (message, TRUE);

  append_args (message, spec->args);
  return message;
}

/* What the daemon's Owners signal tells a member of offline_names: who
 * owns SENDER_NAME and OTHER_NAME */
static DBusHashTable *
owners_new (void)
{
  DBusHashTable *owners = _dbus_hash_table_new (DBUS_HASH_STRING, NULL, NULL);

  g_assert_nonnull (owners);
  g_assert_true (_dbus_hash_table_insert_string (owners, (char *) SENDER_NAME,
                                                 (char *) offline_names.sender));
  g_assert_true (_dbus_hash_table_insert_string (owners, (char *) OTHER_NAME,
                                                 (char *) offline_names.other));
  return owners;
}

static void
test_match (void)
{
  DBusHashTable *owners = owners_new ();
  gsize i;

  for (i = 0; i < G_N_ELEMENTS (match_cases); i++)
    {
      const MatchCase *c = &match_cases[i];
      const MessageSpec *spec = find_message (c->message);
      gchar *text = expand (c->rule, &offline_names);
      DBusMatchRule *rule = parse_ok (text);
      DBusMessage *message = build_message (spec, &offline_names);
      gboolean matches;

      if (strcmp (spec->id, "sig-from-bus") == 0)
        g_assert_true (dbus_message_set_sender (message, DBUS_SERVICE_DBUS));
      else
        g_assert_true (dbus_message_set_sender (message, offline_names.sender));

      matches = _dbus_match_rule_matches (rule, message,
                                          offline_names.receiver, owners);
      g_test_message ("%s ~ %s: %d", text, spec->id, matches);

      if (matches != c->libdbus)
        g_error ("\"%s\" %s \"%s\"", text,
                 matches ? "matches" : "does not match", spec->id);

      dbus_message_unref (message);
      _dbus_match_rule_unref (rule);
      g_free (text);
    }

  _dbus_hash_table_unref (owners);
}

/* A message without SENDER matches no sender= key */
static void
test_match_no_sender (void)
{
  DBusHashTable *owners = owners_new ();
  DBusMatchRule *rule;
  DBusMessage *message;

  message = build_message (find_message ("sig"), &offline_names);

  rule = parse_ok ("sender=':1.42'");
  g_assert_false (_dbus_match_rule_matches (rule, message, ":1.44", owners));
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("sender='org.freedesktop.DBus'");
  g_assert_false (_dbus_match_rule_matches (rule, message, ":1.44", owners));
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("sender='" SENDER_NAME "'");
  g_assert_false (_dbus_match_rule_matches (rule, message, ":1.44", owners));
  _dbus_match_rule_unref (rule);

  rule = parse_ok ("type='signal'");
  g_assert_true (_dbus_match_rule_matches (rule, message, ":1.44", owners));
  _dbus_match_rule_unref (rule);

  dbus_message_unref (message);
  _dbus_hash_table_unref (owners);
}

/* ---- the same tables against dbus-daemon ---- */

typedef struct
{
  GPid pid;
  gchar *address;
  DBusConnection *sender;
  DBusConnection *other;
  DBusConnection *receiver;
  Names names;
} Bus;

static DBusConnection *
connect_bus (const char *address)
{
  DBusError error = DBUS_ERROR_INIT;
  DBusConnection *c;

  c = dbus_connection_open_private (address, &error);
  if (c == NULL || !dbus_bus_register (c, &error))
    g_error ("cannot connect to %s: %s", address, error.message);

  return c;
}

static void
request_name (DBusConnection *c,
              const char     *name)
{
  DBusError error = DBUS_ERROR_INIT;

  g_assert_cmpint (dbus_bus_request_name (c, name,
                                          DBUS_NAME_FLAG_DO_NOT_QUEUE,
                                          &error),
                   ==, DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER);
}

/* The daemon must not outlive a test that aborts */
static void
die_with_parent (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGTERM);
}

/* Starts or joins the bus; FALSE (test skipped) if there is none */
static gboolean
bus_setup (Bus *bus)
{
  const char *stage;

  memset (bus, 0, sizeof (*bus));

  if (g_getenv ("DBUS_TEST_DAEMON_ADDRESS") != NULL)
    {
      bus->address = g_strdup (g_getenv ("DBUS_TEST_DAEMON_ADDRESS"));
    }
  else if ((stage = g_getenv ("DBUS_MCAST_STAGE")) != NULL)
    {
      gchar *daemon = g_build_filename (stage, "bin", "dbus-daemon", NULL);
      const char *argv[] = { daemon, "--session", "--nofork",
                             "--print-address=1", NULL };
      GError *gerror = NULL;
      gint out;
      GIOChannel *channel;
      gsize len;

      if (!g_spawn_async_with_pipes (NULL, (gchar **) argv, NULL,
                                     G_SPAWN_DO_NOT_REAP_CHILD,
                                     die_with_parent, NULL,
                                     &bus->pid, NULL, &out, NULL, &gerror))
        g_error ("cannot start %s: %s", daemon, gerror->message);

      channel = g_io_channel_unix_new (out);
      g_io_channel_set_close_on_unref (channel, TRUE);
      if (g_io_channel_read_line (channel, &bus->address, &len, NULL,
                                  &gerror) != G_IO_STATUS_NORMAL)
        g_error ("no address from %s", daemon);
      g_io_channel_unref (channel);
      g_strchomp (bus->address);
      g_free (daemon);
    }
  else
    {
      g_test_skip ("neither DBUS_TEST_DAEMON_ADDRESS nor DBUS_MCAST_STAGE "
                   "is set");
      return FALSE;
    }

  g_test_message ("bus: %s", bus->address);
  bus->sender = connect_bus (bus->address);
  bus->other = connect_bus (bus->address);
  bus->receiver = connect_bus (bus->address);
  request_name (bus->sender, SENDER_NAME);
  request_name (bus->other, OTHER_NAME);
  bus->names.sender = dbus_bus_get_unique_name (bus->sender);
  bus->names.other = dbus_bus_get_unique_name (bus->other);
  bus->names.receiver = dbus_bus_get_unique_name (bus->receiver);
  return TRUE;
}

static void
bus_teardown (Bus *bus)
{
  DBusConnection **c[] = { &bus->sender, &bus->other, &bus->receiver };
  gsize i;

  for (i = 0; i < G_N_ELEMENTS (c); i++)
    {
      dbus_connection_close (*c[i]);
      dbus_connection_unref (*c[i]);
    }

  if (bus->pid != 0)
    {
      kill (bus->pid, SIGTERM);
      waitpid (bus->pid, NULL, 0);
      g_spawn_close_pid (bus->pid);
    }

  g_free (bus->address);
}

static void
test_daemon_parse (void)
{
  Bus bus;
  gsize i;

  if (!bus_setup (&bus))
    return;

  for (i = 0; i < G_N_ELEMENTS (parse_cases); i++)
    {
      DBusError error = DBUS_ERROR_INIT;

      dbus_bus_add_match (bus.receiver, parse_cases[i].text, &error);
      g_test_message ("%s -> %s", parse_cases[i].text,
                      error.name ? error.name : "ok");

      if (parse_cases[i].error == NULL)
        {
          if (dbus_error_is_set (&error))
            g_error ("dbus-daemon rejects \"%s\": %s", parse_cases[i].text,
                     error.message);

          dbus_bus_remove_match (bus.receiver, parse_cases[i].text, &error);
          g_assert_false (dbus_error_is_set (&error));
        }
      else
        {
          if (!dbus_error_is_set (&error))
            g_error ("dbus-daemon accepts \"%s\"", parse_cases[i].text);

          g_assert_cmpstr (error.name, ==, parse_cases[i].error);
          dbus_error_free (&error);
        }
    }

  {
    DBusError error = DBUS_ERROR_INIT;
    gchar *text = long_rule (DBUS_MAXIMUM_MATCH_RULE_LENGTH + 1);

    dbus_bus_add_match (bus.receiver, text, &error);
    g_assert_cmpstr (error.name, ==, DBUS_ERROR_LIMITS_EXCEEDED);
    dbus_error_free (&error);
    g_free (text);
  }

  bus_teardown (&bus);
}

#define SENTINEL_RULE "type='signal',interface='com.example.Sentinel'"

/* Whether the receiver gets @message (sent by the sender) before a
 * sentinel signal that the sender sends next */
static gboolean
bus_delivers (Bus         *bus,
              DBusMessage *message)
{
  DBusMessage *sentinel;
  dbus_uint32_t serial, sentinel_serial;
  gboolean delivered = FALSE;

  sentinel = dbus_message_new_signal ("/", "com.example.Sentinel", "S");
  g_assert_true (dbus_connection_send (bus->sender, message, &serial));
  g_assert_true (dbus_connection_send (bus->sender, sentinel,
                                       &sentinel_serial));
  dbus_connection_flush (bus->sender);
  dbus_message_unref (sentinel);

  for (;;)
    {
      DBusMessage *m;

      m = dbus_connection_pop_message (bus->receiver);
      if (m == NULL)
        {
          g_assert_true (dbus_connection_read_write (bus->receiver, 10000));
          continue;
        }

      if (g_strcmp0 (dbus_message_get_sender (m), bus->names.sender) == 0)
        {
          if (dbus_message_get_serial (m) == serial)
            delivered = TRUE;
          else if (dbus_message_get_serial (m) == sentinel_serial)
            {
              dbus_message_unref (m);
              return delivered;
            }
        }

      dbus_message_unref (m);
    }
}

static void
test_daemon_match (void)
{
  Bus bus;
  gsize i;
  DBusError error = DBUS_ERROR_INIT;
  guint checked = 0;

  if (!bus_setup (&bus))
    return;

  dbus_bus_add_match (bus.receiver, SENTINEL_RULE, &error);
  g_assert_false (dbus_error_is_set (&error));

  for (i = 0; i < G_N_ELEMENTS (match_cases); i++)
    {
      const MatchCase *c = &match_cases[i];
      const MessageSpec *spec = find_message (c->message);
      gchar *text;
      DBusMessage *message;
      gboolean delivered;

      if (c->daemon < 0)
        {
          g_assert_false (spec->sendable);
          continue;
        }

      g_assert_true (spec->sendable);
      text = expand (c->rule, &bus.names);
      message = build_message (spec, &bus.names);

      dbus_bus_add_match (bus.receiver, text, &error);
      if (dbus_error_is_set (&error))
        g_error ("AddMatch (\"%s\"): %s", text, error.message);

      delivered = bus_delivers (&bus, message);
      g_test_message ("%s ~ %s: dbus-daemon %d", text, spec->id, delivered);

      if (delivered != c->daemon)
        g_error ("dbus-daemon %s \"%s\" for \"%s\"",
                 delivered ? "delivers" : "does not deliver", spec->id, text);

      dbus_bus_remove_match (bus.receiver, text, &error);
      g_assert_false (dbus_error_is_set (&error));
      dbus_message_unref (message);
      g_free (text);
      checked++;
    }

  g_test_message ("%u cases checked against dbus-daemon", checked);
  g_assert_cmpuint (checked, >, 100);
  bus_teardown (&bus);
}

/* Each RemoveMatch finds the rule added under an equal spelling */
static void
test_daemon_equal (void)
{
  Bus bus;
  gsize i;

  if (!bus_setup (&bus))
    return;

  for (i = 0; i < G_N_ELEMENTS (equality_cases); i++)
    {
      DBusError error = DBUS_ERROR_INIT;

      g_test_message ("\"%s\" vs \"%s\"", equality_cases[i].a,
                      equality_cases[i].b);
      dbus_bus_add_match (bus.receiver, equality_cases[i].a, &error);
      g_assert_false (dbus_error_is_set (&error));
      dbus_bus_remove_match (bus.receiver, equality_cases[i].b, &error);

      if (equality_cases[i].equal)
        {
          g_assert_false (dbus_error_is_set (&error));
        }
      else
        {
          g_assert_cmpstr (error.name, ==, DBUS_ERROR_MATCH_RULE_NOT_FOUND);
          dbus_error_free (&error);
          dbus_bus_remove_match (bus.receiver, equality_cases[i].a, &error);
          g_assert_false (dbus_error_is_set (&error));
        }
    }

  bus_teardown (&bus);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/match-rule/parse/keys", test_parse_keys);
  g_test_add_func ("/match-rule/parse/args", test_parse_args);
  g_test_add_func ("/match-rule/parse/quoting", test_parse_quoting);
  g_test_add_func ("/match-rule/parse/errors", test_parse_errors);
  g_test_add_func ("/match-rule/parse/quirks", test_parse_quirks);
  g_test_add_func ("/match-rule/parse/oom", test_oom);
  g_test_add_func ("/match-rule/ref", test_ref);
  g_test_add_func ("/match-rule/equal", test_equal);
  g_test_add_func ("/match-rule/match", test_match);
  g_test_add_func ("/match-rule/match/no-sender", test_match_no_sender);
  g_test_add_func ("/match-rule/daemon/parse", test_daemon_parse);
  g_test_add_func ("/match-rule/daemon/match", test_daemon_match);
  g_test_add_func ("/match-rule/daemon/equal", test_daemon_equal);

  return g_test_run ();
}
