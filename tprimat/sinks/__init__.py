"""Where a run's records and result go besides result.json (W&B)."""
