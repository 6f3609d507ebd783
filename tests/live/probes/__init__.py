"""The probes of ``make verify-live``, one module per area (tests/live/framework.py says how a
module declares them); modules starting with ``_`` hold what several areas share."""
