"""The quality axis: the case study's tasks, trained for every family.

``base`` holds the contract the parts share (a split of a task as arrays, the metric
names); ``data`` and ``imdb`` make the splits (NumPy, no torch); ``model`` puts a task
head on the project's blocks and ``train`` is the one training loop (torch).
"""
