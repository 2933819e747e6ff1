"""A credential's way into the requests the proxy terminates: the ``Injector`` interface (``interface``) and its
implementations: ``swap`` (a token's header swap), ``template`` (``kind: secret``'s header template) and ``sigv4``
(the AWS re-signer). Import the modules themselves, this package re-exports nothing.
"""
