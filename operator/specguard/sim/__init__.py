"""specguard.sim."""
