"""This folder imported by its own name, ``kernels``, instead of as ``hwsim.kernels``.

That happens where a checkout is on ``sys.path`` (pytest's ``pythonpath``, ``python -m`` or a
script run from the checkout): the folder then shadows an installed package named ``kernels``,
Hugging Face's kernel hub, which transformers >= 5.25 requires and imports. hwsim never imports
the bare name, so ``hand_over`` gives it to the installed package when there is one.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def hand_over(name: str, init_file: str) -> bool:
    """Replace this folder's module ``name`` (and its submodules) in ``sys.modules`` with the
    package of that name found on ``sys.path`` outside the checkout that holds ``init_file``;
    False (nothing changed) when there is none."""
    # real paths: a checkout reached through a symlink (or also on sys.path by its real name)
    # must not find this very folder again as the package "elsewhere"
    here = os.path.realpath(os.path.dirname(os.path.abspath(init_file)))
    checkout = os.path.dirname(here)
    elsewhere = [entry for entry in sys.path if os.path.realpath(entry or os.curdir) != checkout]
    spec = importlib.machinery.PathFinder.find_spec(name, elsewhere)
    if spec is None or spec.loader is None:
        return False
    if spec.origin and os.path.realpath(os.path.dirname(spec.origin)) == here:
        return False
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[loaded]
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return True
