"""Evaluation: the protocols of the trained team and the baselines, row records, metrics."""
