"""Stands in for the ``flows`` package in the default-load test."""
