"""``python -m hwsim.cli``: the same as the ``hwsim`` command."""

import sys

from hwsim.cli.main import main

sys.exit(main())
