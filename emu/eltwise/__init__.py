"""Element-wise family: each device's element-wise (and pass-through) arithmetic."""
