"""specguard.api."""
