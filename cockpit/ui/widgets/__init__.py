"""Dashboard widgets. They render what they are given; no I/O, no parsing (tests/test_layering.py)."""
