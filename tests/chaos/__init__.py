"""The chaos run."""
