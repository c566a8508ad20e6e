import os
import sys

# `python -m` puts the working dir first on sys.path, and the executor unpacks the user's
# src_dir there: a user's json.py or xml/ must never stand in for a module the executor imports
# later (it imports some lazily). The runtime comes from PYTHONPATH.
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from tony_py.executor.main import main  # noqa: E402

main()
