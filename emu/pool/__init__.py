"""Pooling family: each device's pooling arithmetic."""
