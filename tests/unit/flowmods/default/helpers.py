"""Domain code without a flow: skipped by the default load."""
