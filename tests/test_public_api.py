"""The public compression API (edgesdk.compress), files recognised by content, and `edgesdk export`."""
from __future__ import annotations

import inspect
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

import edgesdk
import edgesdk.compress
import edgesdk.export
from conftest import ort_run
from edgesdk.cli import main
from edgesdk.compress import LayerSettings, Recipe, compress_model, pack_model
from edgesdk.errors import ModelLoadError
from edgesdk.models import default_model_path
from onnx_builders import single_node_model

DIGITS = default_model_path()


# -- edgesdk.compress ---------------------------------------------------------------------------
def test_compress_exports_what_the_readme_uses():
    for name in ("compress_model", "pack_model", "Recipe", "LayerSettings", "RecipeError", "PackResult"):
        assert name in edgesdk.compress.__all__ and getattr(edgesdk.compress, name) is not None
    assert "pack_model" in dir(edgesdk.compress)
    with pytest.raises(AttributeError):
        edgesdk.compress.no_such_thing  # noqa: B018


def test_importing_compress_loads_neither_torch_nor_onnx():
    """Neither `import edgesdk` nor edgesdk.compress's public names load onnx or torch (they are
    imported where a model is read or fine-tuned; tests/test_install.py checks the rest)."""
    code = ("import sys, edgesdk\n"
            "assert 'onnx' not in sys.modules, 'onnx after import edgesdk'\n"
            "import edgesdk.compress\n"
            "from edgesdk.compress import compress_model, pack_model, Recipe, LayerSettings, PackResult\n"
            "assert 'torch' not in sys.modules, 'torch'\n"
            "assert 'onnx' not in sys.modules, 'onnx'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _public_functions(module) -> list[tuple[str, object]]:
    found = []
    for name in getattr(module, "__all__", [n for n in dir(module) if not n.startswith("_")]):
        obj = getattr(module, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            found.append((name, obj))
            if inspect.isclass(obj) and obj.__module__.startswith("edgesdk"):
                for member, value in vars(obj).items():
                    value = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
                    if not member.startswith("_") and (inspect.isfunction(value) or isinstance(value, property)):
                        found.append((f"{name}.{member}", value))
    return found


@pytest.mark.parametrize("module", [edgesdk, edgesdk.compress, edgesdk.export, edgesdk.loader],
                         ids=lambda m: m.__name__)
def test_public_functions_have_docstrings(module):
    missing = [name for name, obj in _public_functions(module) if not inspect.getdoc(obj)]
    assert not missing, f"no docstring: {missing}"


def test_py_typed_marker_ships_with_the_package():
    # pyproject's wheel.packages = ["edgesdk"] copies the whole package folder into the wheel
    assert (Path(edgesdk.__file__).parent / "py.typed").is_file()


def _outputs(package, x) -> np.ndarray:
    return edgesdk.Session(package).run({"input": x})["logits"]


def test_pack_model_takes_a_path_a_model_proto_or_a_graph(tmp_path, rng):
    recipe = Recipe(LayerSettings(cluster_bits=4, per_channel=True))
    proto = onnx.load(str(DIGITS))
    graph = edgesdk.Session(DIGITS, optimize=False).graph
    results = [pack_model(source, tmp_path / f"{i}.edgepkg", recipe)
               for i, source in enumerate([DIGITS, str(DIGITS), proto, graph])]
    x = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    reference = _outputs(results[0].output, x)
    for result in results[1:]:
        np.testing.assert_array_equal(_outputs(result.output, x), reference, err_msg=result.source)
    assert results[2].source_bytes == proto.ByteSize() and "ModelProto" in results[2].source
    assert results[3].source_bytes == sum(t.nbytes for t in graph.constants()) and "Graph" in results[3].source
    assert all(r.package_bytes < r.source_bytes for r in results)
    info = edgesdk.package.read_package_info(results[2].output)
    assert info["source_sha256"] == edgesdk.package.sha256_file(DIGITS)  # same bytes as the file
    assert edgesdk.package.read_package_info(results[3].output)["source_sha256"] is None
    assert len(graph.nodes) == len(edgesdk.Session(DIGITS, optimize=False).graph.nodes), "the Graph was modified"


def test_pack_model_refuses_to_overwrite_its_source(tmp_path):
    source = tmp_path / "m.onnx"
    source.write_bytes(DIGITS.read_bytes())
    with pytest.raises(edgesdk.PackageError, match="is the source model"):
        pack_model(source, tmp_path / "." / "m.onnx", Recipe())
    assert source.read_bytes() == DIGITS.read_bytes()


def test_compress_model_defaults_to_a_dense_recipe():
    graph, reports = compress_model(DIGITS)
    assert reports and not any(t.encoding for t in graph.constants())


def test_pack_model_with_a_dataset_measures_accuracy(tmp_path):
    from edgesdk.datasets import Dataset
    rng = np.random.default_rng(1)
    data = Dataset("tiny", rng.standard_normal((16, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 16))
    result = pack_model(onnx.load(str(DIGITS)), tmp_path / "m.edgepkg", Recipe(LayerSettings(fp16=True)), data=data)
    assert result.accuracy is not None and result.baseline_accuracy is not None


# -- files recognised by content ----------------------------------------------------------------
def _zip(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(name, b"x")
    return path


FOREIGN_FILES = {
    "tflite": (lambda p: p.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64)), "tf2onnx.convert --tflite"),
    "torchscript": (lambda p: _zip(p, ["model/code/__torch__.py", "model/constants.pkl", "model/data.pkl"]),
                    "TorchScript"),
    "torch_save": (lambda p: _zip(p, ["archive/data.pkl", "archive/version"]), "torch.onnx.export"),
    "pickle": (lambda p: p.write_bytes(pickle.dumps({"conv.weight": [1.0]}, protocol=2)), "pickle"),
    "keras_h5": (lambda p: p.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64)), "--keras"),
    "keras3": (lambda p: _zip(p, ["config.json", "metadata.json", "model.weights.h5"]), "Keras 3"),
    "ncnn": (lambda p: p.write_text("7767517\n3 3\nInput data 0 1 data\n"), "NCNN"),
    "openvino": (lambda p: p.write_text('<?xml version="1.0"?>\n<net name="m" version="11">\n</net>\n'), "OpenVINO"),
    "empty": (lambda p: p.write_bytes(b""), "empty"),
    "zip": (lambda p: _zip(p, ["readme.txt"]), "zip archive"),
}


@pytest.mark.parametrize("kind", sorted(FOREIGN_FILES))
@pytest.mark.parametrize("suffix", [".onnx", ".bin"])
def test_other_formats_get_a_one_line_hint(tmp_path, kind, suffix):
    make, words = FOREIGN_FILES[kind]
    path = tmp_path / f"model{suffix}"
    make(path)
    with pytest.raises(ModelLoadError, match=words) as info:
        edgesdk.Session(path)
    assert "\n" not in str(info.value)


def test_directories(tmp_path):
    saved_model = tmp_path / "saved"
    saved_model.mkdir()
    (saved_model / "saved_model.pb").write_bytes(b"\x08\x01")
    with pytest.raises(ModelLoadError, match="SavedModel.*--saved-model"):
        edgesdk.Session(saved_model)
    with pytest.raises(ModelLoadError, match="is a directory"):
        edgesdk.Session(tmp_path)
    fifo = tmp_path / "model.onnx.fifo"
    os.mkfifo(fifo)  # opening it would wait for a writer forever
    with pytest.raises(ModelLoadError, match="not a regular file"):
        edgesdk.Session(fifo)


def test_renamed_files_load_by_content(tmp_path, rng):
    package = tmp_path / "m.edgepkg"
    pack_model(DIGITS, package, Recipe(LayerSettings(cluster_bits=4)))
    disguised_package, disguised_onnx = tmp_path / "model.onnx", tmp_path / "weights.dat"
    disguised_package.write_bytes(package.read_bytes())
    disguised_onnx.write_bytes(DIGITS.read_bytes())
    x = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    assert edgesdk.Session(disguised_package).graph.metadata.get("package")  # read as a package
    np.testing.assert_array_equal(_outputs(disguised_package, x), _outputs(package, x))
    np.testing.assert_array_equal(_outputs(disguised_onnx, x), _outputs(DIGITS, x))
    garbage = tmp_path / "garbage.edgepkg"
    garbage.write_bytes(b"\x00\xffnot a model" * 20)
    with pytest.raises(ModelLoadError, match="not a readable ONNX model"):
        edgesdk.Session(garbage)


# -- edgesdk export (CLI) -----------------------------------------------------------------------
def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_export_writes_an_onnx_model(tmp_path, capsys, rng):
    package, exported = tmp_path / "m.edgepkg", tmp_path / "out" / "m.onnx"
    pack_model(DIGITS, package, Recipe(LayerSettings(prune=0.5, cluster_bits=4)))
    code, out, err = _cli(capsys, "export", str(package), "-o", str(exported))
    assert code == 0 and f"wrote {exported}" in out, (out, err)
    model = onnx.load(str(exported))
    onnx.checker.check_model(model, full_check=True)
    x = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    (logits,) = ort_run(model, {"input": x})
    np.testing.assert_allclose(logits, _outputs(package, x), rtol=1e-4, atol=1e-5)
    code, out, _ = _cli(capsys, "export", str(package), "-o", str(exported), "--json")
    assert code == 0 and '"bytes"' in out


def test_cli_export_of_onnx_with_a_chosen_batch(tmp_path, capsys, rng):
    exported = tmp_path / "batch3.onnx"
    code, _, err = _cli(capsys, "export", str(DIGITS), "-o", str(exported), "--input-shape", "input=3x1x8x8")
    assert code == 0, err
    model = onnx.load(str(exported))
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [3, 1, 8, 8]
    x = rng.standard_normal((3, 1, 8, 8)).astype(np.float32)
    (expected,) = ort_run(onnx.load(str(DIGITS)), {"input": x})
    np.testing.assert_allclose(ort_run(model, {"input": x})[0], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["missing", "tflite", "directory", "unwritable", "output_is_dir", "same_file"])
def test_cli_export_errors_are_one_line_exit_2(tmp_path, capsys, case):
    tflite = tmp_path / "m.tflite"
    tflite.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64))
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    model, output, words = {
        "missing": (tmp_path / "nope.edgepkg", tmp_path / "o.onnx", "not found"),
        "tflite": (tflite, tmp_path / "o.onnx", "TensorFlow Lite"),
        "directory": (tmp_path, tmp_path / "o.onnx", "is a directory"),
        "unwritable": (DIGITS, blocker / "o.onnx", "cannot write"),
        "output_is_dir": (DIGITS, tmp_path, "is a directory"),
        "same_file": (tflite, tflite, "is the model being exported"),
    }[case]
    code, out, err = _cli(capsys, "export", str(model), "-o", str(output))
    assert code == 2 and err.startswith("edgesdk: error: ") and words in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.glob(".*.tmp")) and not (tmp_path / "o.onnx").exists()


def test_cli_export_reports_unsupported_input_in_one_line(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    onnx.save(single_node_model("Relu", (1, 3, 4, 4)), str(model))
    model.write_bytes(model.read_bytes()[:30])  # truncated
    code, _, err = _cli(capsys, "export", str(model), "-o", str(tmp_path / "o.onnx"))
    assert code == 2 and err.count("\n") == 1


def test_inspect_shows_fixed_dimensions(tmp_path, capsys):
    package = tmp_path / "m.edgepkg"
    pack_model(DIGITS, package, Recipe())
    for model in (DIGITS, package):
        code, out, _ = _cli(capsys, "inspect", str(model))
        assert code == 0
        lines = [line for line in out.splitlines() if line.startswith("fixed:")]
        assert lines == ["fixed:   input 'input' dimension 0 (N) is dynamic in the model and runs as 1 "
                         "(choose another size: --input-shape input=4x1x8x8)"], out
    code, out, _ = _cli(capsys, "inspect", str(DIGITS), "--input-shape", "input=2x1x8x8")
    assert "fixed:" not in out
