"""tprimat: benchmark LLM training across GPU platforms and training frameworks."""

__version__ = "0.1.0"
