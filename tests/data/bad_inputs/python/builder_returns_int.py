def build(config):
    return 42
