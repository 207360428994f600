"""fusec's version: a leaf module, so that anything may import it without importing fusec."""

__version__ = "0.1.0"
