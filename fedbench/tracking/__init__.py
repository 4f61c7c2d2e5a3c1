"""Recording and reporting: the MLflow callback, the console progress bar, results tables."""
