"""Entry point of the frozen app (PyInstaller)."""
import sys

from iastudio.app.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
