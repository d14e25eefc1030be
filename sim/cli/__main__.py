"""``python -m sim.cli``: the ``innet`` command."""

import sys

from sim.cli.main import main

sys.exit(main())
