"""The version of rollaudit, in one place (the package, the cache key and baselines read it)."""

__version__ = "0.1.0"
