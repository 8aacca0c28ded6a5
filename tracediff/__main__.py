import sys

from tracediff.cli import main

sys.exit(main())
