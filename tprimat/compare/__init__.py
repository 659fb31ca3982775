"""``tprimat compare``: read result files only, group, aggregate with honest statistics, report."""
