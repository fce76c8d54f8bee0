"""specguard.judge."""
