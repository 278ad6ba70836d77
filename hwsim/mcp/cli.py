"""placeholder"""


def register(commands):
    pass
