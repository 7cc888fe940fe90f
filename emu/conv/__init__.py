"""Convolution family: the shared exact integer convolution and each device's conv, depthwise
and matmul arithmetic."""
