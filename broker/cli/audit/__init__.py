"""``broker audit ...``: the auditor's commands."""
