"""A domain helper module: exports no flow."""

ANSWER = 42
