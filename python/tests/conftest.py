"""pytest configuration for python/tests: markers for the tests that run
ferry's C++ programs. CTest (python/CMakeLists.txt) names the programs in
the environment, and deselects a marker's tests only when the build has
no such program (LibTorch was not found)."""
import os


def pytest_configure(config):
    config.addinivalue_line("markers", "torch_cpp: round-trips through ferry::libtorch (FERRY_TORCH_TIED)")
    config.addinivalue_line("markers", "distributed: the torch.distributed backend (ferry._distributed)")
    config.addinivalue_line("markers", "mixed: ranks of other architectures under qemu (FERRY_MIXED_PYTHON, FERRY_MIXED_TREE_PREFIX)")
    config.addinivalue_line("markers", "trainer: trains with ferry-run and ferry-train (FERRY_RUN, FERRY_TRAIN)")
    config.addinivalue_line("markers", "safetensors: the safetensors library as an oracle (Debian 13's python3-safetensors)")
    config.addinivalue_line("markers", "torch2: FSDP, DTensor and torch.distributed.checkpoint over ferry (torch >= 2)")


def program(variable):
    """The path of a C++ program CTest named in `variable`."""
    path = os.environ.get(variable)
    if not path:
        raise RuntimeError(f"{variable} is not set: run these tests through ctest (python_test)")
    return path
