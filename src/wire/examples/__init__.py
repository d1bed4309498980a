"""Example jobs and their inputs (the NYC 2013 flights)."""
