"""The hpcdl command's cheap paths: no TensorFlow import for --help and info."""
import json
import subprocess
import sys

from hpcdl_testing import ROOT, STACK, TF_SERIES


def _run(*args):
    return subprocess.run([sys.executable, "-c", (
        "import sys, runpy; sys.argv = ['hpcdl'] + sys.argv[1:]\n"
        "from hpcdl.cli import main\n"
        "rc = main()\n"
        "print('TF_LOADED' if 'tensorflow' in sys.modules else 'TF_NOT_LOADED', file=sys.stderr)\n"
        "sys.exit(rc)"), *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_help_lists_commands_without_importing_tensorflow():
    res = subprocess.run([sys.executable, "-c",
                          "import sys\nfrom hpcdl.cli import build_parser\nbuild_parser().format_help()\n"
                          "print('tensorflow' in sys.modules, 'horovod.tensorflow' in sys.modules, "
                          "'mpi4py.MPI' in sys.modules)"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.stdout.strip() == "False False False", res.stderr


def test_info_shows_horovod_built_with_tensorflow_and_mpi_without_importing_tensorflow():
    res = _run("info", "--json", "--check")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    hb = info["horovod_build"]
    assert hb["frameworks"]["tensorflow"] is True
    assert hb["controllers"]["mpi"] is True
    assert info["versions"]["tensorflow"].startswith(TF_SERIES)
    assert "Open MPI" in info["versions"]["mpi"]
    assert "TF_NOT_LOADED" in res.stderr
    # the stack scripts/setup.sh installed, the Keras tf.keras is, the patches Horovod has
    assert info["stack"]["stack"] == STACK
    if STACK == "tf2.21":
        assert info["versions"]["keras"].startswith("tf-keras 2.21")
        folder = ROOT / "scripts" / "horovod-patches" / STACK
        shipped = sorted(p.name for p in folder.glob("*.patch"))
        assert info["versions"]["horovod_patches"] == "+".join(shipped) and len(shipped) >= 2
    else:
        assert info["versions"]["keras"].startswith("keras 2.15")
        assert not info["versions"]["horovod_patches"] and not info["stack"]["horovod_patches"]


def test_info_text_names_every_component():
    res = _run("info")
    assert res.returncode == 0
    for word in ("Python", "TensorFlow", "Keras", f"Stack       {STACK}", "Horovod",
                 "controllers:", "[X] mpi", "MPI ", "mpi4py", "numpy", "Launcher"):
        assert word in res.stdout


def test_unknown_flag_is_one_line_and_exit_2():
    res = _run("train", "--no-such-flag")
    assert res.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in res.stderr
    assert "Traceback" not in res.stderr


def test_help_offers_every_backend_and_compression_from_their_one_list():
    from hpcdl.comm import BACKENDS, COMPRESSIONS
    text = " ".join(_run("train", "--help").stdout.split())
    assert f"gradient exchange: {', '.join(BACKENDS)}" in text
    assert f"gradient compression: {', '.join(COMPRESSIONS)}" in text


_LEAVE = """\
import atexit, sys, threading, types
mode = sys.argv[1]
if mode == "tf":
    sys.modules["tensorflow"] = types.ModuleType("tensorflow")    # what the exit goes by
from hpcdl.cli import main
sys.stdout.write("x" * 200000)                                    # still in the buffer
atexit.register(lambda: sys.stdout.write("|atexit ran"))
# without TensorFlow the thread goes on once main has returned (a fixed sleep raced a main that
# took over 3 s on a loaded machine); with it, main never returns and the exit joins the thread
returned = threading.Event()
worker = threading.Thread(target=lambda: (returned.wait(3.0 if mode == "tf" else 50.0),
                                          sys.stdout.write("|thread done")))
worker.start()
sys.argv = ["hpcdl", "bench", "fit", "--input", "no-such-file.jsonl"]
rc = main()
sys.stdout.write("|main returned %d" % rc)
returned.set()
sys.exit(rc)
"""


def test_a_command_that_loaded_tensorflow_leaves_at_once_with_its_code_and_nothing_lost():
    """After TensorFlow, the program skips Python's teardown (seconds of CPU in every rank) but
    first joins its threads, runs the atexit handlers and flushes its output, and keeps the
    command's exit status; without TensorFlow, main returns as usual."""
    for mode in ("tf", "no-tf"):
        res = subprocess.run([sys.executable, "-c", _LEAVE, mode], capture_output=True,
                             text=True, cwd=ROOT, timeout=60)
        assert res.returncode == 2, res.stderr           # bench fit: no such input file
        assert "no-such-file.jsonl" in res.stderr
        out = res.stdout
        assert out.startswith("x" * 200000), out[:100]
        if mode == "tf":
            assert out[200000:] == "|thread done|atexit ran", out[200000:]
        else:
            assert out[200000:] == "|main returned 2|thread done|atexit ran", out[200000:]
