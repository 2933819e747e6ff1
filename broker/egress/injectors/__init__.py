"""A credential's way into the requests the proxy terminates: the ``Injector`` interface and its implementations.

``interface`` is what the terminated path asks of an injector (``begin`` on a request head gives a ``Passage``, an
``Answer`` to refuse, or nothing; ``mask_pairs``; ``forget``); words only, no HTTP library. The injectors:
``swap`` (``HeaderSwap``: a token's placeholder swapped in ``Authorization`` and its provider's token headers,
with the ``AnswerGuard`` its provider declares), ``template`` (``HeaderTemplate``: a ``kind: secret`` put into
the one header its grant names) and ``sigv4`` (``Resigner``: an AWS request signed with placeholder keys verified
and signed again with the real ones). An injector stands on the operations' ``Answer`` (what a refusal sends) and
the standard library; it never imports the terminated path that calls it.

Import the modules themselves, this package re-exports nothing.
"""
