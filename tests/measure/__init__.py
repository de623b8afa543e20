"""Tests of ssmbench.measure."""
