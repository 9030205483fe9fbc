import sys

from numabench.cli import main

sys.exit(main())
