"""pymlgo: machine-learning-guided compiler optimization with a stock clang in the loop."""

__version__ = "0.1.0"
