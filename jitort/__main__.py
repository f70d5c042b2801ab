import sys

from jitort.apps.cli import main

sys.exit(main())
