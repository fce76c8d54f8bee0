"""specguard.router."""
