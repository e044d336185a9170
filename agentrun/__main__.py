"""``python -m agentrun``: the ``agentrun`` command."""

import sys

from .cli import main

sys.exit(main())
