# A stand-in for the expecttest package (not in Debian 12), which
# torch.testing._internal.common_utils imports for its TestCase base and
# its ACCEPT flag. PyTorch's distributed suite makes no expect-test
# assertions, so a plain unittest.TestCase serves.
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    pass
