"""The package version, in one place: the public surface and the sweep store's code version read it."""

__version__ = "0.1.0"
