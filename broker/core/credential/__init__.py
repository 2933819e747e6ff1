"""One credential's own steps, shared by the session verbs: mint and record it (``mint``), revoke or settle it
(``revoke``), withhold one not handed out (``withholding``), reserve room to revoke it (``reserving``), hold it
in the session's proxy (``proxied``).

A package, not one module, because withholding sits between mint and revoke: ``Minting.mint`` withholds a
credential that fails a check after minting, and withholding revokes it with ``revoke_credential``. An
import contract keeps the package below the verbs. Import the submodules.
"""
