"""Measurement: timing now; memory, energy, profiler and ceilings follow the same shape."""
