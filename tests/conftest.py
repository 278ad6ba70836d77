"""Settings of the whole test run.

Initcheck is on for every simulated run that does not say otherwise (``run(..., initcheck=None)``
reads ``HWSIM_INITCHECK``): library kernels, kernel-language tests and the bridge's lowered
graphs must never read memory nothing wrote. Tests that plant such reads pass ``initcheck=``
explicitly. ``HWSIM_INITCHECK=0 pytest ...`` runs the suite without it (to measure its cost).
"""

import os

os.environ.setdefault("HWSIM_INITCHECK", "1")
# Tests never read or write the user's lowering cache (bridge.lowering_store); its own tests
# point it at a temporary folder.
os.environ["HWSIM_LOWERING_CACHE"] = "off"
