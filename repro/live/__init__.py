"""Live: the evidence wave (fresh samples and canaries of every hop), the live judge that gathers one and classifies a stalled or failed round, and triage of a live hang from one wave."""
