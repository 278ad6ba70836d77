"""A pytest plugin that makes ``import neuronxcc.nki`` / ``import nki`` resolve to hwsim.nki:
the one line nki-samples' own unit tests need to run on the simulator (``-p``)."""

import hwsim.nki

hwsim.nki.install()
