"""The kit's version, in a module of its own so that any module can read it without importing
the package root (which loads the chains)."""

__version__ = "0.1.0"

__all__ = ["__version__"]
