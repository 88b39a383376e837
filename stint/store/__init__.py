"""Data access: every statement Stint sends to PostgreSQL, the pools that carry
them, the rows they return and the errors they raise. Imports nothing else of
Stint's (checked by import-linter)."""
