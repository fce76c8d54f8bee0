"""specguard.sources."""
