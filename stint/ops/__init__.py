"""The operator's side: the ``stint`` CLI and what it shows (status, follow,
checks, sizing, the demo) and the helpers that start worker processes."""
