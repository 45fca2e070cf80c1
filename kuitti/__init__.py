"""kuitti: an open digital receipt service."""

__version__ = "0.1.0"
