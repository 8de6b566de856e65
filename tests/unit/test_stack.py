"""The TensorFlow stack: which Keras tf.keras is, the clear error where it is Keras 3, and what
scripts/setup.sh wrote of the stack it installed."""
import json
import os
import subprocess
import sys

import pytest

from hpcdl import stack
from hpcdl.errors import UserError
from hpcdl_testing import ROOT, STACK


def test_tensorflow_from_2_16_on_makes_tf_keras_keras_3_unless_told():
    assert not stack.keras_3_by_default("2.15.1") and not stack.keras_3_by_default(None)
    assert stack.keras_3_by_default("2.16.0") and stack.keras_3_by_default("2.21.0")
    assert stack.keras_3_by_default("3.0.0")


def test_tf_keras_is_named_by_the_package_it_resolves_to(monkeypatch):
    found = {"tensorflow-cpu": "2.21.0", "tf-keras": "2.21.0", "keras": "3.15.1"}
    monkeypatch.setattr(stack, "package_version", lambda *names: next(
        (found[n] for n in names if n in found), None))
    assert stack.keras({"TF_USE_LEGACY_KERAS": "1"}) == "tf-keras 2.21.0"
    assert stack.keras({}) == "keras 3.15.1"
    found.update({"tensorflow-cpu": "2.15.1", "keras": "2.15.0"})
    assert stack.keras({"TF_USE_LEGACY_KERAS": "1"}) == "keras 2.15.0"   # 2.15 has no switch


def _legacy_after_import(value):
    code = "import os, hpcdl; print(os.environ.get('TF_USE_LEGACY_KERAS'))"
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    if value is not None:
        env["TF_USE_LEGACY_KERAS"] = value
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_hpcdl_chooses_legacy_keras_on_new_tensorflow_and_never_asks_old_for_it():
    if STACK == "tf2.21":
        # tf.keras is tf-keras unless the user chose
        assert _legacy_after_import(None) == "1" and _legacy_after_import("0") == "0"
    else:
        # TensorFlow 2.15 honours the variable too and fails without tf-keras: one inherited
        # from a tf2.21 environment is taken away, as if it had never been set
        assert _legacy_after_import(None) == "None" and _legacy_after_import("1") == "None"
        assert _legacy_after_import("0") == "0"


def test_choosing_legacy_keras_follows_the_installed_tensorflow(monkeypatch):
    found = {"tensorflow-cpu": "2.21.0"}
    monkeypatch.setattr(stack, "package_version", lambda *names: next(
        (found[n] for n in names if n in found), None))
    env = {}
    stack.prefer_legacy_keras(env)
    assert env == {"TF_USE_LEGACY_KERAS": "1"}
    found["tensorflow-cpu"] = "2.15.1"
    stack.prefer_legacy_keras(env)
    assert env == {}                          # 2.15 without tf-keras: never asked for
    found["tf-keras"] = "2.15.1"
    env = {"TF_USE_LEGACY_KERAS": "1"}
    stack.prefer_legacy_keras(env)
    assert env == {"TF_USE_LEGACY_KERAS": "1"}  # with tf-keras installed, the user's choice


def test_keras_3_is_refused_with_what_to_do():
    class Keras3:
        __version__ = "3.15.1"

    class TF:
        __version__ = "2.21.0"
        keras = Keras3

    with pytest.raises(UserError, match="TF_USE_LEGACY_KERAS=1 before TensorFlow is imported"):
        stack.check_keras(TF)

    class TF215(TF):
        keras = type("Keras2", (), {"__version__": "2.15.0"})

    stack.check_keras(TF215)


def test_a_script_that_imports_tensorflow_first_with_keras_3_gets_hpcdls_error_not_horovods():
    # the real TensorFlow of this stack, told not to use legacy Keras before hpcdl is imported
    code = ("import tensorflow as tf\n"
            "try:\n"
            "    import hpcdl.train.keras\n"
            "except Exception as exc:\n"
            "    print('refused:', exc)\n"
            "else:\n"
            "    print('accepted: TensorFlow', tf.__version__)\n")
    env = dict(os.environ, TF_USE_LEGACY_KERAS="0", TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    if STACK == "tf2.21":
        assert out.stdout.startswith("refused: tf.keras is Keras 3"), out.stdout + out.stderr
        assert "horovod issue 4290" in out.stdout
    else:
        assert out.stdout.strip().startswith("accepted: TensorFlow 2.15"), out.stdout + out.stderr


def test_the_stack_file_names_the_stack_and_horovods_patches(tmp_path):
    assert stack.setup_facts(str(tmp_path)) == {} and stack.horovod_patches(str(tmp_path)) == []
    (tmp_path / stack.STACK_FILE).write_text(json.dumps(
        {"stack": "tf2.21", "horovod_patches": ["0001-build-without-xla-ops.patch"]}))
    assert stack.setup_facts(str(tmp_path))["stack"] == "tf2.21"
    assert stack.horovod_patches(str(tmp_path)) == ["0001-build-without-xla-ops.patch"]


def test_every_patch_says_what_it_fixes_and_why_before_its_diff():
    patches = sorted((ROOT / "scripts" / "horovod-patches").glob("*/*.patch"))
    assert patches
    for p in patches:
        text = p.read_text()
        head = text.split("\n--- a/", 1)[0]
        assert "\n--- a/" in text and "Why:" in head and "What changes:" in head, p


def test_tensorflows_cuda_start_up_notes_are_left_out_and_anything_else_it_writes_is_kept(
        tmp_path):
    # a stand-in TensorFlow that writes, at import, what TF 2.21's CPU wheel writes and one
    # line of its own, through file descriptor 2 as the C++ logging does
    (tmp_path / "tensorflow.py").write_text(
        "import os\n"
        "os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called are "
        "written to STDERR\\n')\n"
        "os.write(2, b'I0000 00:00:1.2 123 cudart_stub.cc:31] Could not find cuda drivers on "
        "your machine, GPU will not be used.\\n')\n"
        "os.write(2, b'I0000 00:00:1.3 123 port.cc:153] oneDNN custom operations are on. You may "
        "see slightly different numerical results due to floating-point round-off errors from "
        "different computation orders. To turn them off, set the environment variable "
        "`TF_ENABLE_ONEDNN_OPTS=0`.\\n')\n"
        "os.write(2, b'E0000 something TensorFlow means\\n')\n")
    code = "from hpcdl import stack; tf = stack.import_tensorflow(); print(tf.__name__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, PYTHONPATH=f"{tmp_path}:{ROOT}"))
    assert out.returncode == 0 and out.stdout.strip() == "tensorflow", out.stderr
    assert out.stderr == "E0000 something TensorFlow means\n"


def test_the_real_tensorflow_of_this_stack_imports_without_a_word_on_stderr():
    code = "from hpcdl import stack; tf = stack.import_tensorflow(); print(tf.__version__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
    assert out.stderr == ""


@pytest.mark.parametrize("asked", ["other", "tf9.9"])
def test_setup_refuses_another_stack_in_an_existing_venv_and_an_unknown_stack(asked):
    other = "tf2.21" if STACK == "tf2.15" else "tf2.15"
    stack_asked = other if asked == "other" else asked
    res = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, text=True,
                         capture_output=True, timeout=120,
                         env=dict(os.environ, HPCDL_STACK=stack_asked, HPCDL_VENV=sys.prefix))
    assert res.returncode == 2, res.stderr
    if asked == "other":
        assert f"holds TensorFlow {stack.tensorflow_version()}, not the {other} stack" in res.stderr
    else:
        assert "HPCDL_STACK=tf9.9: the stacks are tf2.15 and tf2.21" in res.stderr


def test_hpcdl_info_says_whose_stack_it_is():
    from hpcdl import info
    assert "unpatched" in info._stack_words({"stack": "tf2.15", "horovod_patches": []})
    assert "2 patch(es) from scripts/horovod-patches/tf2.21/" in info._stack_words(
        {"stack": "tf2.21", "horovod_patches": ["0001-a.patch", "0002-b.patch"]})
    # a cluster module's TensorFlow and Horovod, used as they are: nothing claimed of patches
    words = info._stack_words({"stack": "tf2.21", "system": True, "horovod_patches": []})
    assert "the environment's own" in words and "unpatched" not in words
    assert "not set up by scripts/setup.sh" in info._stack_words({})


def _core_linked_in(exe) -> bool:
    out = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, timeout=30)
    return out.returncode == 0 and "libpython" not in out.stdout


def _interpreters_of_this_version():
    """This machine's python3.X of the running version, by whether its core is linked into the
    executable: {True: [...], False: [...]}."""
    import glob
    import shutil
    name = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    found = {os.path.realpath(p) for p in glob.glob(f"/root/.pyenv/versions/*/bin/{name}")}
    found |= {os.path.realpath(os.path.join(d, name)) for d in os.environ["PATH"].split(":")
              if os.access(os.path.join(d, name), os.X_OK)}
    found |= {os.path.realpath(p) for p in [shutil.which(name, path="/usr/bin:/usr/local/bin")]
              if p}
    kinds = {True: [], False: []}
    for exe in sorted(found):
        kinds[_core_linked_in(exe)].append(exe)
    return name, kinds


def test_setup_builds_a_new_venv_from_an_interpreter_with_its_core_linked_in(tmp_path):
    name, kinds = _interpreters_of_this_version()
    if not kinds[True] or not kinds[False]:
        pytest.skip(f"needs a {name} with its core linked in and one that loads libpython "
                    f"(found: {kinds})")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / name).symlink_to(kinds[False][0])          # first on PATH, loading libpython
    env = dict(os.environ, PATH=f"{shared}:{os.environ['PATH']}", HPCDL_STACK=STACK,
               HPCDL_VENV=str(tmp_path / "venv"))
    env.pop("HPCDL_PYTHON", None)

    def which(**extra):
        res = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--which-python"],
                             capture_output=True, text=True, timeout=120, env=dict(env, **extra))
        assert res.returncode == 0, res.stderr
        return res.stdout.strip()

    chosen = which()
    assert chosen.endswith("(its core linked into the executable)"), chosen
    assert _core_linked_in(chosen.split(" (")[0]), chosen
    assert not (tmp_path / "venv").exists()                 # nothing made, nothing installed
    # asked for by name, the interpreter loading libpython is taken as it is
    assert which(HPCDL_PYTHON=str(shared / name)) == f"{shared / name} (HPCDL_PYTHON)"
