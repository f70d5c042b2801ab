"""Draw jitort's memory plan for a model at given input shapes as a PNG (``jitort memory``).

    python scripts/memory_plot.py MODEL --shape input_ids=1x128 --shape attention_mask=1x128 \
        [--png plan.png]

Every workspace tensor is a rectangle: x = the schedule steps it is live, y = its bytes in the
workspace. The black curve is the bytes live per step (its maximum is the lower bound no plan
can beat), the dashed line the workspace jitort allocates. Prints the report per plan.
"""
import sys

from jitort.apps.cli import main

if __name__ == "__main__":
    sys.exit(main(["memory", *sys.argv[1:]]))
