"""Executors: a device's run of operations as one table, run by one compiled call."""
