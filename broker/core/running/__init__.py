"""A running session: one ``broker exec`` session from its issue to its revocation (``session``: the one object
direct ``exec`` and the daemon's held execs share), and what changes it while its command runs: its standing
under the policy as it is now (standing), an outside revoke (halting), ``session allow|disallow`` (allowing), its
proxied credentials renewed behind their placeholders (rotating, and ``broker renew`` asking for it: forcing), a
``kind: secret``'s new version (refreshing), the session document kept true after a renewal (documenting), and
the children its sandbox asks for on its ``broker.sock`` (session_socket)."""
