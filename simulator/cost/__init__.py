"""Step-time cost models: how long one engine step takes for a batch (constant, roofline, table)."""
