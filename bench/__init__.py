"""Benchmarks: named matrices that print figures and the ratio to the reference, never assert."""
