"""Readers and writers of files: plans, timelines, and other tools' formats."""
