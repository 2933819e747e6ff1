"""The allow-list: the destinations a session may reach; ``lists`` reads it as manifests and rules write it and
decides whether a rule covers a manifest's. Import the modules themselves, this package re-exports nothing.
"""
