"""The ``github_app`` provider: installation tokens limited to listed repositories and permissions."""
