# PYTHON_ARGCOMPLETE_OK
import sys

from comminsight.cli import main

sys.exit(main())
