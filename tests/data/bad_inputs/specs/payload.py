"""Importing this file writes PWNED beside it: a dry run of dry_run_imports_nothing.yaml must not."""

import pathlib

pathlib.Path(__file__).with_name("PWNED").write_text("imported\n")


def build(config):
    raise AssertionError("never run by a dry run")
