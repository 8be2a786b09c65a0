"""``python -m scalerepro.cli``: as the ``scalerepro`` command."""

import sys

from scalerepro.cli import main

sys.exit(main())
