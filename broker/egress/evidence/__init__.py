"""The ``egress.request`` records of a session's terminated requests: the record, its writer, its budget.

``record`` (``Evidence``) is one request's record, filled in by the terminated path as the request goes;
``writer`` (``EvidenceWriter``) appends a session's records from a thread of its own, batched, with back-pressure
on the proxy; ``budget`` (``EvidenceBudget``, ``Ledger``) bounds what one session's records may add to the log.
The config reads ``[egress] evidence_budget`` with ``budget`` alone (no h11, no thread): import the modules
themselves, this package re-exports nothing.
"""
