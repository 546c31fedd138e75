from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # codegen is a development tool, not part of the package
    sys.path.insert(0, str(ROOT))
