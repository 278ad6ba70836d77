import sys

sys.exit(0)  # at import: ends the run with status 0 and nothing printed, unless caught
