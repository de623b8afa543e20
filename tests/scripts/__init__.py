"""Tests of the tools in scripts/."""
