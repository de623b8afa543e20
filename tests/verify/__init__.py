"""Tests of ssmbench.verify."""
