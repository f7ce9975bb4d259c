"""Names starting with '_' are never imported by the default load."""

raise RuntimeError("the default load must not import private modules")
