"""``python -m scalerepro.sim.run POINT_JSON``: one simulation in this process (see scalerepro.sim.engine)."""

import sys

from scalerepro.sim.engine import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
