"""specguard.controller."""
