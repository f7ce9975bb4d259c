"""Exports ``flow`` but it is not a Flow."""

flow = "costing"
