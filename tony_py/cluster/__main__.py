import sys

from tony_py.cluster.cli import main

sys.exit(main())
