"""Tests of ssmbench.tasks."""
