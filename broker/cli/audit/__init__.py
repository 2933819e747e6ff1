"""``broker audit ...``: the auditor's commands, registered here in the order ``broker audit --help`` lists them.

Reading, checking and keying the log is ``commands``; what a fleet adds (its log
in PostgreSQL, every host's keys, ``export``) is ``fleet``.
"""

from __future__ import annotations

import typer

from broker.cli.audit.commands import active, list_records, lookup, migrate_keys, public_key, rotate_key, verify
from broker.cli.audit.fleet import export

audit_app = typer.Typer(help="Verify and read the issuance log.", no_args_is_help=True)
audit_app.command("verify")(verify)
audit_app.command("list")(list_records)
audit_app.command("lookup")(lookup)
audit_app.command("active")(active)
audit_app.command("public-key")(public_key)
audit_app.command("rotate-key")(rotate_key)
audit_app.command("migrate-keys")(migrate_keys)
audit_app.command("export")(export)
