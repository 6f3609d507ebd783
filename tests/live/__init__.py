"""``make verify-live``: probes of AWS behaviour no offline test can show (framework.py)."""
