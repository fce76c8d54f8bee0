"""specguard.testing."""
