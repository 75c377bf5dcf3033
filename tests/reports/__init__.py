"""Tests of the run report and comparison pages (issue 38)."""
