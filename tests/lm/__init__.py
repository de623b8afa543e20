"""Tests of ssmbench.lm."""
