"""Setting the broker up and checking it: ``broker init`` and ``broker doctor``."""
