import sys

from comminsight.cli import main

sys.exit(main())
