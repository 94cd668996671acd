"""Judging: the live judge that gathers an evidence wave and classifies a stalled or failed round, and triage of a live hang."""
