"""specguard.evaluate."""
