"""`streamasr bench`: accuracy, latency and speed of streaming settings over a test set.

datasets.py reads the test set, runner.py streams each utterance through the same loop as
`streamasr file`, metrics.py scores and times one utterance, report.py aggregates the records
into summaries and the run record, results.py writes results.json / results.md and the table,
baseline.py compares against an earlier run (--baseline, --fail-on), sweep.py runs one
setting after another. Nothing here prints; the `bench` command does.
"""
