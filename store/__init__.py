"""Stint store package."""
