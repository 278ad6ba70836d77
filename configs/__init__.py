"""Hardware presets and their JSON schema, installed as ``hwsim.configs`` (package data).

Edit the YAML files here; the package reads them through ``importlib.resources``, so a wheel or a
non-editable install carries them too. Python code never lives in this folder.
"""
