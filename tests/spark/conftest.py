"""The Spark tests' session is the ``spark`` fixture of tests/conftest.py (shared)."""
