import sys

from orchestry.cli import main

sys.exit(main())
