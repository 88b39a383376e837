"""Stint worker package."""
