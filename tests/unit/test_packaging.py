"""An installed hpcdl (a wheel, not the source tree) renders job scripts from its packaged templates."""
import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from hpcdl_testing import ROOT


def _copy_source(dst):
    """The files a wheel is built from, copied out of the work tree (no build output left there)."""
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dst / name)
    shutil.copytree(ROOT / "hpcdl", dst / "hpcdl",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", ".*.so.*"))


def _wheel_in_a_fresh_venv(tmp_path):
    """The wheel built from a copy of the source (this interpreter's setuptools, offline) and
    installed without dependencies into a fresh venv: (the build's output, the wheel, the venv,
    its python, an empty working directory outside the checkout)."""
    src, wheels, env_dir, work = (tmp_path / d for d in ("src", "wheels", "venv", "elsewhere"))
    for d in (src, work):
        d.mkdir()
    _copy_source(src)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "-q", "-w", str(wheels), str(src)], capture_output=True, text=True,
                           timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    wheel = next(wheels.glob("hpcdl-*.whl"))
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    inst = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert inst.returncode == 0, inst.stderr[-3000:]
    return build.stdout + build.stderr, wheel, env_dir, py, work


@pytest.mark.slow
def test_a_wheel_installed_in_a_fresh_venv_renders_a_job_script(tmp_path):
    # rendering needs only the standard library: nothing beside the wheel is installed
    built, _, env_dir, py, work = _wheel_in_a_fresh_venv(tmp_path)
    # every folder of the package is a package: setuptools has nothing to warn about
    assert "absent from the" not in built, built[-3000:]
    res = subprocess.run([str(py), "-m", "hpcdl.launch.jobscript", "--nodes", "2", "--time", "01:00:00",
                          "--", "--workload", "cnn"], capture_output=True, text=True, timeout=120,
                         cwd=work, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "#SBATCH --nodes=2" in res.stdout and "--workload cnn" in res.stdout
    assert "# --- Settings ----" in res.stdout                 # a {{> part}} include came along
    where = subprocess.run([str(py), "-c", "import hpcdl; print(hpcdl.__file__)"],
                           capture_output=True, text=True, cwd=work, timeout=60).stdout
    assert where.startswith(str(env_dir)), where               # the installed copy, not the tree


def _stack_site_packages():
    """The site-packages folder of the interpreter running the tests (the stack's TensorFlow,
    tf-keras, Horovod and mpi4py), as a cluster module would provide them."""
    import sysconfig
    return sysconfig.get_paths()["purelib"]


@pytest.mark.slow
def test_a_wheel_installed_beside_an_existing_stack_lists_every_command_and_trains(tmp_path):
    """`pip install --no-deps` of the wheel into an environment whose TensorFlow and Horovod come
    from elsewhere (here, this venv's, as a cluster module's would): every command is there, and
    one rank trains from the installed copy with the working directory outside the checkout."""
    _, wheel, env_dir, py, work = _wheel_in_a_fresh_venv(tmp_path)
    import zipfile
    names = zipfile.ZipFile(wheel).namelist()
    for pkg in sorted({p.parent for p in (ROOT / "hpcdl").rglob("*.py")}):
        rel = pkg.relative_to(ROOT).as_posix()
        assert f"{rel}/__init__.py" in names, f"{rel} is not in the wheel"
    # the stack's packages seen through a .pth line, after the venv's own: the wheel's hpcdl wins
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, timeout=60).stdout.strip()
    Path(site, "zz-stack.pth").write_text(_stack_site_packages() + "\n")
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    helped = subprocess.run([str(env_dir / "bin" / "hpcdl"), "--help"], capture_output=True,
                            text=True, cwd=work, env=env, timeout=120)
    assert helped.returncode == 0, helped.stderr[-3000:]
    from hpcdl.cli import COMMANDS
    for name, _, _ in COMMANDS:
        assert f"    {name}" in helped.stdout, (name, helped.stdout)
    trained = subprocess.run([str(env_dir / "bin" / "hpcdl"), "train", "--workload", "expmlp",
                              "--num-iters", "2", "--num-batches-per-iter", "2",
                              "--num-warmup-batches", "1", "--results", str(work / "runs.jsonl")],
                             capture_output=True, text=True, cwd=work, env=env, timeout=300)
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-3000:]
    assert "Total samples/sec on 1 rank(s)" in trained.stdout, trained.stdout[-2000:]
    rec = json.loads((work / "runs.jsonl").read_text().splitlines()[-1])
    assert rec["status"] == "ok"
    where = subprocess.run([str(py), "-c", "import hpcdl.train.run as m; print(m.__file__)"],
                           capture_output=True, text=True, cwd=work, env=env, timeout=120).stdout
    assert where.startswith(str(env_dir)), where               # the installed copy, not the tree


TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel",
                    "tf-nightly", "tf-nightly-cpu")


def test_the_venv_holds_one_tensorflow_and_starts_it_without_a_cuda_error():
    """scripts/setup.sh installs one TensorFlow wheel (tf-keras without its dependencies, which
    would add the CUDA build into the same tensorflow/ folder): on a machine without an NVIDIA
    driver, the CPU build, and importing it says nothing of CUDA."""
    import importlib.metadata as md
    have = sorted({d.metadata["Name"].lower().replace("_", "-") for d in md.distributions()}
                  & set(TF_DISTRIBUTIONS))
    assert len(have) == 1, f"TensorFlow distributions in this venv: {have} (run scripts/setup.sh)"
    if shutil.which("nvidia-smi") is None:
        assert have == ["tensorflow-cpu"]
        res = subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0 and "cuInit" not in res.stderr and "CUDA" not in res.stderr, \
            res.stderr[-2000:]
