"""Tests of the workflow itself: Snakemake runs of the presets, bad input, locks, healing
end to end, clusters and leases."""
