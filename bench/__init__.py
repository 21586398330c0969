"""Benchmarks that print figures; see README."""
