"""The evaluation workflow: golden files, runs, the run store, statistics, calibration, reports."""
