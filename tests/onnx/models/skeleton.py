"""Refills the graph skeletons of this directory (export_models.py) in
numpy: each initializer whose doc_string is "tj-fill MEAN STD MIN MAX" gets
seeded normal values of that mean and std clamped to [MIN, MAX], as
tests/onnx/onnx_models_test.c does in C (with its own generator: the values
differ, their statistics do not). Needs onnx and numpy only."""

import os

import numpy as np

MODELS = ("resnet18", "mobilenet_v3_small", "bert_layer", "encoder_layer")
DIR = os.path.dirname(os.path.abspath(__file__))


def input_shape(name, batch, seq=128):
    if name == "encoder_layer":
        return (batch, 64, 256)
    return (batch, seq, 768) if name == "bert_layer" else (batch, 3, 224, 224)


def filled(name, seed=15, directory=DIR):
    """The model |name| with its weights, as an onnx.ModelProto."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(os.path.join(directory, name + ".onnx"))
    rng = np.random.default_rng(seed)
    for i, init in enumerate(model.graph.initializer):
        words = init.doc_string.split()
        if len(words) != 5 or words[0] != "tj-fill":
            continue
        mean, std, lo, hi = (float(w) for w in words[1:])
        a = np.clip(mean + std * rng.standard_normal(tuple(init.dims)), lo, hi)
        t = numpy_helper.from_array(a.astype(np.float32), init.name)
        model.graph.initializer[i].CopyFrom(t)
    return model
