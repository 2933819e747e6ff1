"""``broker issue | revoke | status | renew | exec | sweep``: the session commands, one module each.

Each module imports at its top exactly what its command needs; the command
table (``broker.commands.table``) names the module, so ``broker revoke`` never
loads what ``issue`` parses with (the policy, the manifest, YAML).
"""
