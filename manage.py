#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    if sys.argv[1:2] == ["runserver"]:
        from console.secret_key import ensure_local_key
        from inventory.env import load_env_file

        # Sessions signed by the development server must survive its restarts.
        load_env_file()
        ensure_local_key()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
