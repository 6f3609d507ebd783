"""Capacity windows: plan, buy exactly once, rotate consumers onto blocks and drain them."""
