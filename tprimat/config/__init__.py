"""Typed configuration: Hydra schemas (schema.py) and the frozen run spec (spec.py)."""
