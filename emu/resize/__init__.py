"""Resize family: Ethos-U85 RESIZE."""
