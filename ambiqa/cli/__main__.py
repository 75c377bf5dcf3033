"""``python -m ambiqa.cli``."""

import sys

from ambiqa.cli import main

sys.exit(main())
