def build(config:
    return None
