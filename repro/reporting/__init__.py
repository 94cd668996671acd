"""Reporting: terminal views, the run summary, re-judging a run and its HTML, bench results and HTML, the deployment diff."""
