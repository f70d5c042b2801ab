"""Test-wide settings.

Tiered execution (jitort/tiering.py) is off unless a test asks for it (``tiered=True``): the
suite checks what the compiled program does, and a background compile process per test model
would only load the machine. tests/test_tiering.py covers the tiered path itself.
"""
import os

os.environ.setdefault("JITORT_TIERED", "0")
