"""`pip install .` from the source tree, checked: a venv of this interpreter
(seeing Debian's torch and numpy: --system-site-packages), pip building
the wheel through scikit-build-core with Debian's build requirements
(--no-build-isolation, --no-index: nothing from PyPI), then `import ferry`
and the backend from that venv, outside the tree. Run by CTest as
python_pip_install_test where scikit-build-core is installed (the torch26
tree: Debian 13's python3-scikit-build-core; Debian 12 has none).

  pip_install.py SOURCE_DIR WORK_DIR
"""
import os
import shutil
import subprocess
import sys


def main():
    source, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    venv = os.path.join(work, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    # pip itself comes from Debian's python3-pip, seen through the system site.
    subprocess.run([python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps", "-q", source],
                   check=True, env=dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")))
    check = (
        "import os, sys, numpy as np, torch, ferry, ferry.distributed\n"
        "assert ferry.__file__.startswith(sys.prefix), ferry.__file__  # the venv's, not the tree's\n"
        "p = os.path.join(sys.argv[1], 'z.pt')\n"
        "z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)\n"
        "torch.save({'z': z, 'f8': torch.arange(4, dtype=torch.uint8).view(torch.float8_e4m3fnuz)}, p)\n"
        "got = ferry.load(p, framework='torch')\n"
        "assert torch.equal(got['z'], z) and got['f8'].dtype == torch.float8_e4m3fnuz, got\n"
        "assert 'ferry' in torch.distributed.Backend.backend_list, torch.distributed.Backend.backend_list\n"
        "print('pip install .: ferry', ferry.info()['version'], 'on Python', sys.version.split()[0],\n"
        "      'torch', torch.__version__)\n"
    )
    subprocess.run([python, "-c", check, work], check=True, cwd=work)


if __name__ == "__main__":
    main()
