import sys

from stability.cli import main

sys.exit(main())
