"""Frameworks that need GPUs and their own environments, driven as separate processes: tprimat translates the
spec into their launch surface, streams and parses what they print, and audits what they actually ran."""
