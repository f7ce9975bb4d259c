"""Tiny flow modules for the registry tests."""
