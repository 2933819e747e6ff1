"""The allow-list: the destinations a session may reach.

``lists`` reads it as manifests (``network.allow``) and policy rules (``network``) write it and decides whether a
rule covers a manifest's, when a session is issued; standard library only, so every command that reads a manifest
or a policy may load it. ``gate`` enforces a running session's list at connect time, in its proxy: each
connection, the listener's and the terminated path's upstream ones, goes only to a vetted address of an allowed
destination, and what was refused is counted (asyncio: a proxy's alone).
"""
