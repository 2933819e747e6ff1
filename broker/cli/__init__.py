"""The command line: parse, call the core, print. Only ``broker.entry`` and ``__main__`` import it."""
