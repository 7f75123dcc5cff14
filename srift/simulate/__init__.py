"""Iteration simulator: DDP with bucketed all-reduce overlap, mixed clusters, spot, K-FAC."""
