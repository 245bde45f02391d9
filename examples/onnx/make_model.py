"""Write model.onnx: a stand-in for a trained seizure model, made without downloading weights.

The graph is a logistic regression over three features of one channel in one 10 s window
(``probability = sigmoid(features @ weights + bias)``), with fixed weights chosen by hand.
A real submission replaces model.onnx with its own trained network, exported to ONNX by its
training framework; detect.py only needs the input and output names and the feature list
below, which the model carries in its metadata.

Run with the ``onnx`` package installed (it is in szbench's dev extra)::

    python examples/onnx/make_model.py examples/onnx/model.onnx

The file is byte-for-byte reproducible: the opset and IR version are pinned rather than
taken from whichever onnx release is installed, so the committed model.onnx can be checked
against this script (tests/worker/test_onnx_example.py does).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FEATURES = ("line_length_z", "rhythmic_power_z", "fast_power_z")
WINDOW_S = 10
# Seizures raise line length and 2.5-12 Hz power together; muscle artifacts raise line
# length through fast activity instead, so fast power counts against a window.
WEIGHTS = np.array([[0.9], [0.9], [-0.3]], dtype=np.float32)
BIAS = np.array([-8.0], dtype=np.float32)
# Opset 13 and IR version 7 load in every onnxruntime of the last years (1.8 onwards).
OPSET = 13
IR_VERSION = 7


def build_model() -> onnx.ModelProto:
    """The logistic model with its metadata (feature order, window length)."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["features", "weights"], ["score"]),
            helper.make_node("Add", ["score", "bias"], ["logit"]),
            helper.make_node("Sigmoid", ["logit"], ["probability"]),
        ],
        "szbench_example_logistic",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["rows", len(FEATURES)])],
        [helper.make_tensor_value_info("probability", TensorProto.FLOAT, ["rows", 1])],
        initializer=[
            numpy_helper.from_array(WEIGHTS, "weights"),
            numpy_helper.from_array(BIAS, "bias"),
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="szbench examples/onnx/make_model.py",
        doc_string="Example only: fixed weights, not trained. Replace with a real model.",
    )
    helper.set_model_props(model, {"features": ",".join(FEATURES), "window_s": str(WINDOW_S)})
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="where to write the model (model.onnx)")
    args = parser.parse_args()
    args.output.write_bytes(build_model().SerializeToString(deterministic=True))


if __name__ == "__main__":
    main()
