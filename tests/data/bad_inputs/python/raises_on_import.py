raise RuntimeError("this module refuses to be imported")
