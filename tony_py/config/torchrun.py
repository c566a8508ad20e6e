"""Where torchrun goes into a job type's command (tony.<type>.nproc-per-node > 1).

The command `<python> <script> <args>` (what --python_binary_path, --executes and --task_params
compose) runs as `<python> -m torch.distributed.run <torchrun's flags> <script> <args>`, so the
job's own interpreter (the user's venv and its torch) runs torchrun, and torchrun runs the
script with that same interpreter. `<python> -m <module> <args>` works too (torchrun's own -m).

Only the interpreter word is split off; the rest of the command stays the text the user wrote
(its quoting and `$NAME` references reach bash unchanged). Here, in config, because the client
refuses a command it cannot split at submit (exit 2); the executor uses the same split.
"""

from __future__ import annotations

import os
import re
import shlex

MODULE = "torch.distributed.run"
# One shell word at the start of the command: unquoted characters, '...', "..." or \x.
_FIRST_WORD = re.compile(r"""^\s*((?:[^\s'"\\]|'[^']*'|"(?:[^"\\]|\\.)*"|\\.)+)(?:\s+|$)""")
_PYTHON = re.compile(r"^python[0-9.]*$")


def split_interpreter(command: str) -> tuple[str, str, str]:
    """(the interpreter word as written, the same word unquoted, the rest of the command as
    written). ValueError says what is wrong, without repeating the command (it may hold
    credentials)."""
    m = _FIRST_WORD.match(command)
    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    if not m or len(words) < 2:
        raise ValueError("needs a command of the form `<python> <script.py> [args]` or `<python> -m <module> [args]`")
    script = words[1]
    if script.startswith("-") and not (script == "-m" and len(words) > 2):
        raise ValueError(f"takes no interpreter option ({script[:20]!r}) before the script: torchrun starts "
                         "each process as `<python> -u <script>` itself; only `-m <module>` is allowed there")
    return m.group(1), words[0], command[m.end():]


def check_command(command: str, python: str | None = None) -> None:
    """What the client checks at submit: a command split_interpreter can split, whose first word
    is a Python interpreter (named python*, or `python`, the job's --python_binary_path)."""
    _, interpreter, _ = split_interpreter(command)
    if not (_PYTHON.match(os.path.basename(interpreter)) or (python and interpreter == python)):
        raise ValueError(f"needs a command that starts with the Python interpreter (`<python> <script.py> [args]`), "
                         f"not {os.path.basename(interpreter)[:40]!r}: torchrun runs the script with that interpreter")
