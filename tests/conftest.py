# Shared by every area: keep minimal. The cluster tier's fixtures live in the package.
pytest_plugins = ["specguard.testing.pytest_plugin"]
