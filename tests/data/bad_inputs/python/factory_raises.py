def make():
    raise KeyError("no model")
