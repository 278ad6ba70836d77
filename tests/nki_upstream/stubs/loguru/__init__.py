"""Stand-in for loguru (stubs/README.md): ``logger`` logs through the standard library."""

import logging

logger = logging.getLogger("loguru-stand-in")
