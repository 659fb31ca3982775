"""Hydra launcher plugins of tprimat (discovered through the hydra_plugins namespace package)."""
