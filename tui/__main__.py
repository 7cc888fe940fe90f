"""``python -m accelstub.tui [DEVICE] [--device D] [--connect HOST:PORT] [--program P]``."""
import sys

from .app import main

sys.exit(main())
