"""The worker process: a supervisor running the claimer, the lease keeper and
the listener, the slots that run turns, and the harness seam turns run through."""
