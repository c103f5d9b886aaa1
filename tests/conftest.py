from __future__ import annotations

import sys
from pathlib import Path

# tests import their helpers module as `helpers`
sys.path.insert(0, str(Path(__file__).resolve().parent))
