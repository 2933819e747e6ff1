"""What changes a session while its ``broker exec`` runs: an outside revoke (halting), ``session allow|disallow``
(allowing) and its proxied credentials renewed behind their placeholders (rotating)."""
