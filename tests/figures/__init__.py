"""Tests of ssmbench.figures."""
