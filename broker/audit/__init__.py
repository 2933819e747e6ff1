"""The issuance log: append, sign, verify and query; imports only ``broker.vocab``."""
