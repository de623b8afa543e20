"""Tests of ssmbench.models."""
