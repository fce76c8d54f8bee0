"""specguard.render."""
