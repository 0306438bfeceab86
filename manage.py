#!/usr/bin/env python
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
    if sys.argv[1:2] == ["restore"]:
        # Before the settings, which start the embedded PostgreSQL: wrong encryption keys
        # stop the restore here, DATA_DIR untouched (lifecycle/restore_preflight.py).
        from agentplatform import config
        from lifecycle import restore_preflight

        restore_preflight.run(
            sys.argv[2:], data_dir=config.data_dir(Path(__file__).resolve().parent)
        )
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
