"""One credential's own steps, shared by the session verbs: mint and record it (``mint``), revoke or settle it
(``revoke``).

A package, not one module, because withholding sits between the two: ``mint_one`` withholds a credential that
fails a check after minting, and withholding revokes it with ``revoke_credential``. Import the submodules.
"""
