"""Cockpit: a keyboard-driven terminal cockpit for LLM inference servers."""

__version__ = "0.1.0"
