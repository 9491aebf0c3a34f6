import sys

from kvselect_sign.cli import main

sys.exit(main())
