"""Stint loadtest package."""
