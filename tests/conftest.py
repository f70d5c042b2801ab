"""Test-wide settings.

Tiered execution (jitort/tiering.py) is off unless a test asks for it (``tiered=True``): the
suite checks what the compiled program does, and a background compile process per test model
would only load the machine. tests/test_tiering.py covers the tiered path itself.
Calibration (jitort/tuning.py) is off likewise; tests/test_tuning.py covers it.
"""
import os

os.environ.setdefault("JITORT_TIERED", "0")
# Generated code follows the default shape rules, not whatever this machine's calibration
# decided (jitort/tuning.py), and no background calibration starts; tests/test_tuning.py
# turns it on where it tests it.
os.environ.setdefault("JITORT_TUNE", "0")
