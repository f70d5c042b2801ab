"""Compile models into jitort's on-disk cache ahead of time (same as ``jitort warmup``).

    python scripts/warmup.py ../shared/models/bert.onnx --shape input_ids=1x128 \
        --shape attention_mask=1x128 --jobs 2

Every generated module and Numba's compiled code for it land under ``$JITORT_CACHE_DIR``
(default ``~/.cache/jitort``); a later process that compiles the same model with the same
options loads them instead of compiling. A progress bar per model advances per kernel.
"""
import sys

from jitort.apps.cli import main

if __name__ == "__main__":
    sys.exit(main(["warmup", *sys.argv[1:]]))
