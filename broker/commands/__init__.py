"""The command table: every command of ``broker`` declared once (``table``, with the auditor's in ``auditing``;
how a command is declared: ``declaring``). The command line (``broker.cli``), the daemon's thin client
(``broker.client``) and the daemon's dispatch (``broker.daemon.routes``) are made from it; it imports nothing
of theirs (each names the others' functions as ``module:function``), so all three can read it, the thin client
on its cold path."""
