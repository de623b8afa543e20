"""Tests of ssmbench.importers."""
