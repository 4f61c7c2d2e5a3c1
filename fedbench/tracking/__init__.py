"""Recording and reporting: the MLflow callback, a sweep's MLflow runs, the console progress bar, results
tables, leaderboards and plots."""
