"""Hypothesis settings: CI (CI=true, which `make unit` sets, so .ci/run has it) draws the same examples every run, so a
green main stays green; developers get fresh random examples (the default profile)."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
