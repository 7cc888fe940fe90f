"""Numeric primitives: rounding, requantisation, activations, lookup tables, type conversions
and zero points, per device."""
