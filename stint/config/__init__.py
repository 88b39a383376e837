"""Configuration shared by every entry point: the one Settings object, its
command-line mirror, logging, and where the database is."""
