"""`python -m tony_py.submit …`: TonY's ClusterSubmitter, in Python."""

import sys

from tony_py.client.submit import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m tony_py.submit"))
