"""ssmbench.scripting: what the rules share with the workflow's Snakefile."""

from __future__ import annotations

from types import SimpleNamespace

from ssmbench.scripting import group_of


def test_a_job_of_a_group_is_grouped_only_where_the_run_sizes_the_group():
    """``group_of``: no group in a local run (no sizes), the group where the run sizes it,
    and inside a group's allocation (``--local-groupid``, sizes not passed on) one group
    taking every job it is given."""

    def workflow(components, local_groupid="local"):
        settings = SimpleNamespace(group_components=components, local_groupid=local_groupid)
        return SimpleNamespace(group_settings=settings)

    assert group_of(workflow({}), "cells") is None
    assert group_of(workflow({"cells": 20}), "cells") == "cells"
    inside = workflow({}, local_groupid="0f3c")
    assert group_of(inside, "cells") == "cells"
    assert inside.group_settings.group_components["cells"] >= 2**31
