"""Helpers for the thin ``scripts/`` that Snakemake's ``script:`` directive runs."""

from __future__ import annotations

import contextlib
import logging
import sys


@contextlib.contextmanager
def logged(snakemake):
    """Send the job's stdout, stderr and ``logging`` output to its ``log:`` file.

    An exception is written to the log too, then re-raised so the job fails."""
    path = snakemake.log[0]
    with open(path, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        logging.basicConfig(stream=log, level=logging.INFO, force=True,
                            format="%(asctime)s %(levelname)s %(message)s")  # fmt: skip
        try:
            yield
        except BaseException:
            import traceback

            traceback.print_exc(file=log)
            log.flush()
            print(f"error: see {path}", file=sys.__stderr__)
            raise
