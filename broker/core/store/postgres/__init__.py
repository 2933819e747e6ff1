"""The session store in PostgreSQL, for brokers on many hosts: the store, its schema, its locks, the auditor's read."""
