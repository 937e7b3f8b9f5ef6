/* -*- mode: C; c-file-style: "gnu"; indent-tabs-mode: nil; -*- */
/* dbus-mcast-member.h  What a member of a dbus-mcast multicast bus does
 *
 * What this module is for: the client side of the promotion protocol of
 * doc/design.md, for one connection that negotiated multicast
 * (NEGOTIATE_MULTICAST / AGREE_MULTICAST).  It decides; the packet I/O
 * (dbus-seqpacket-io.c) moves the bytes and asks it:
 *
 *  - before sending each message: the first one must be Hello, and
 *    nothing is written after it until its reply has been read (the Hello
 *    fence); once a member, the connection's unique name goes into SENDER,
 *    messages with unix fds or longer than one packet go to the daemon
 *    alone (SCM_UNIX_DIRECT), and nothing is written after such a message
 *    until the daemon's org.freedesktop.DBus.Mcast.Routed signal for it
 *    has been read (the fence), so per-sender order holds across both
 *    paths; a call to the bus driver that changes match rules, names or
 *    monitoring is fenced too, so that it takes effect before anything
 *    sent after it; a call over the bus's reply limit goes to the daemon
 *    alone, fenced, for the daemon to refuse;
 *  - once a call to a well-known name went to the group: under which of
 *    the group's commits the kernel filtered it, which says the member
 *    that received it (_dbus_mcast_member_sent());
 *  - for each message from the daemon (kernel sender id 0, trusted): the
 *    Hello reply makes the connection a member and gives its unique name,
 *    the Routed signal lifts the fence and is consumed, replies complete
 *    the calls and AddMatch/RemoveMatch calls they answer, the
 *    Departed signal (a member left) completes the calls it will never
 *    answer with stock's NoReply error, in the signal's place, the
 *    Owners signal says who owns the well-known names of its rules'
 *    sender= keys, the ReplyLimit signal how many calls may await
 *    replies and the Calls signal where to list the calls to members
 *    it awaits, each with the count of packets the kernel will have
 *    taken from us once it is sent (_dbus_mcast_member_wrote()) (all
 *    consumed; dbus-mcast-calls.h);
 *  - for each packet from another member (any other sender id, untrusted;
 *    one that arrives before the Hello reply, which the daemon sends after
 *    admitting us, is looked at after it):
 *    it must hold exactly one valid message in host byte order whose
 *    SENDER is the name that belongs to the id, replies must answer a call
 *    this connection made, and anything not addressed to this connection
 *    must match one of its match rules (dbus-match-rule.h); otherwise the
 *    packet is dropped and nobody is disconnected.
 *
 * Copyright (C) 2026 dbus-mcast contributors
 * SPDX-License-Identifier: AFL-2.1 OR GPL-2.0-or-later
 */
#ifndef DBUS_MCAST_MEMBER_H
#define DBUS_MCAST_MEMBER_H

#include <dbus/dbus-hash.h>
#include <dbus/dbus-internals.h>
#include <dbus/dbus-message.h>
#include <dbus/dbus-string.h>
#include <dbus/dbus-sysdeps.h>

DBUS_BEGIN_DECLS

/** The daemon's fence signal (doc/design.md, "How a message flows"):
 * dbus-daemon sends it, from DBUS_SERVICE_DBUS on DBUS_PATH_DBUS, to a
 * member once the member's message that went to the daemon alone (its
 * serial, a u, is the argument) has been routed; the member consumes it. */
#define DBUS_MCAST_INTERFACE "org.freedesktop.DBus.Mcast"
#define DBUS_MCAST_ROUTED "Routed"
/** The daemon's departure signal: dbus-daemon sends it, as it sends
 * Routed, to every member once members have disconnected, after
 * everything they sent.  Its argument lists the members that left since
 * the last one, in the order they left: their unique names, an as.
 * Calls between members do not pass the daemon, so only the caller's
 * libdbus knows which of them the departed members will never answer
 * (the kernel told it which member got each, UNIX_GROUP_SENT_TO): it
 * completes them with stock's error, which dbus-daemon would have sent,
 * and consumes the signal. */
#define DBUS_MCAST_DEPARTED "Departed"
#define DBUS_MCAST_DEPARTED_SIGNATURE "as"
/** The daemon's owner signal: dbus-daemon sends it, as it sends Routed,
 * to a member whose match rules name well-known senders, before the reply
 * to the AddMatch that adds such a rule and whenever such a name changes
 * owner, behind the group copies sent before the change.  Its argument
 * lists, for each name that changed, the name and the unique name of its
 * owner, "" for none or once no rule names it any more, an (ss).  A
 * filter loosened to fit (bus/mcast-filter.h) does not compare SENDER,
 * so the member resolves the sender= keys of its rules with these
 * owners (dbus-match-rule.h); it consumes the signal. */
#define DBUS_MCAST_OWNERS "Owners"
#define DBUS_MCAST_OWNERS_SIGNATURE "a(ss)"
/** The daemon's reply limit signal: dbus-daemon sends it, as it sends
 * Routed, to a member before the Hello reply and again when a reload
 * changes max_replies_per_connection, its argument (a u).  Calls between
 * members do not pass the daemon, so the caller's libdbus counts the
 * calls it awaits replies to as the daemon counts them; a call over the
 * limit goes to the daemon alone without SENDER
 * (_dbus_mcast_is_over_reply_limit()), and the daemon refuses it as
 * stock refuses a call over the limit.  The member consumes the signal. */
#define DBUS_MCAST_REPLY_LIMIT "ReplyLimit"
/** The limit before the daemon said one: none */
#define DBUS_MCAST_NO_REPLY_LIMIT 0xffffffffu
/** The text of stock dbus-daemon's NoReply error for a call whose
 * recipient disconnected (bus/connection.c) */
#define DBUS_MCAST_NO_REPLY_TEXT \
  "Message recipient disconnected from message bus without replying"

typedef struct DBusMcastMember DBusMcastMember;

/** What to do with a received message */
typedef enum
{
  DBUS_MCAST_KEEP,     /**< hand it to the message loader */
  DBUS_MCAST_DROP,     /**< throw it away (consumed, or refused) */
  DBUS_MCAST_DEFER,    /**< too early: ask again once the Hello reply was
                        *   read */
  DBUS_MCAST_NO_MEMORY /**< could not decide for lack of memory */
} DBusMcastVerdict;

DBusMcastMember *_dbus_mcast_member_new  (void);
void             _dbus_mcast_member_free (DBusMcastMember *member);

dbus_bool_t _dbus_mcast_member_may_write  (DBusMcastMember *member);
dbus_bool_t _dbus_mcast_member_waits_for_hello (DBusMcastMember *member);
dbus_bool_t _dbus_mcast_member_prepare    (DBusMcastMember *member,
                                           DBusMessage     *message);
dbus_bool_t _dbus_mcast_member_is_direct  (DBusMcastMember *member);
void        _dbus_mcast_member_wrote      (DBusMcastMember *member);
void        _dbus_mcast_member_sent       (DBusMcastMember *member,
                                           DBusSocket       fd);

DBusMcastVerdict _dbus_mcast_member_from_daemon (DBusMcastMember  *member,
                                                 DBusString       *data,
                                                 int               start,
                                                 int               len,
                                                 int              *fds,
                                                 unsigned int     *n_fds);
DBusMcastVerdict _dbus_mcast_member_from_peer   (DBusMcastMember  *member,
                                                 dbus_uint64_t     sender_id,
                                                 const DBusString *data,
                                                 int               start,
                                                 int               len,
                                                 DBusMessage     **checked);

DBUS_PRIVATE_EXPORT
DBusMcastVerdict _dbus_mcast_load_packet    (dbus_uint64_t      sender_id,
                                            const DBusString  *data,
                                            int                start,
                                            int                len,
                                            DBusMessage      **message);
DBUS_PRIVATE_EXPORT
DBusMessage  *_dbus_mcast_no_reply_new      (const char    *destination,
                                            dbus_uint32_t  reply_serial);
DBUS_PRIVATE_EXPORT
DBusMessage  *_dbus_mcast_daemon_signal_new (const char    *member);
DBUS_PRIVATE_EXPORT
DBusMessage  *_dbus_mcast_departed_new      (const char   **names,
                                            int            n_names);
DBUS_PRIVATE_EXPORT
dbus_bool_t   _dbus_mcast_group_can_carry   (DBusMessage *message);
DBUS_PRIVATE_EXPORT
dbus_bool_t   _dbus_mcast_owners_record     (DBusHashTable *owners,
                                            const char    *name,
                                            const char    *owner);
DBUS_PRIVATE_EXPORT
dbus_bool_t   _dbus_mcast_is_fenced         (DBusMessage *message);
DBUS_PRIVATE_EXPORT
dbus_bool_t   _dbus_mcast_is_over_reply_limit (DBusMessage *message);
DBUS_PRIVATE_EXPORT
dbus_uint64_t _dbus_mcast_sender_id_of_name (const char *name);
/** Room for the unique name a kernel sender id stands for */
#define DBUS_MCAST_SENDER_NAME_SIZE sizeof (":4294967295.4294967295")
DBUS_PRIVATE_EXPORT
void          _dbus_mcast_name_of_sender_id (dbus_uint64_t  sender_id,
                                             char          *name);

DBUS_END_DECLS

#endif /* DBUS_MCAST_MEMBER_H */
