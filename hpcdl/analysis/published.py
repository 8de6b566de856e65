"""The model beside a published run: Horovod at 512 GPUs (Sergeev & Del Balso 2018)."""
from __future__ import annotations

import math
from typing import List, Optional


from .. import costmodel
from ..costmodel import PRESETS


# Published: 128 servers x 4 Pascal (P100) GPUs = 512 GPUs on 25 Gbit/s RoCE; scaling efficiency
# 90% for ResNet-101 and 68% for VGG-16 (tf_cnn_benchmarks, synthetic data, batch 64 per GPU).
# Per-GPU img/s: published tf_cnn_benchmarks P100 fp32 figures (ResNet-101 interpolated by FLOPs
# between ResNet-50's 219 and ResNet-152's 91). Parameters: the models' published counts.
PUBLISHED = [
    {"model": "ResNet-101", "params": 44.5e6, "published": 0.90, "img_per_s": 129.0},
    {"model": "VGG-16", "params": 138.0e6, "published": 0.68, "img_per_s": 154.0},
]
PUBLISHED_SETUP = {
    "gpus": 512, "batch_per_gpu": 64, "network": "roce-25g",   # published
    "fusion_bytes": 64 * 2 ** 20,     # HOROVOD_FUSION_THRESHOLD default: one ring per 64 MiB
    "gamma": 1.0 / 500e9,             # assumed: reduction on the GPU at ~500 GB/s
}
PUBLISHED_INPUTS = {
    "published": "GPU count, batch per GPU, network (25 GbE RoCE), the efficiencies, per-GPU "
                 "throughput (tf_cnn_benchmarks), parameter counts",
    "assumed": "α and β of the 25 GbE preset (90% of line rate), γ = 1/(500 GB/s), one ring "
               "per 64 MiB fusion buffer (Horovod's default threshold)",
    "derived": "the window the model needs to meet each published figure",
}


def published_comparison(setup: Optional[dict] = None) -> List[dict]:
    """The model at 512 GPUs for the Horovod paper's set-up, without overlap, beside the published
    efficiency, and the share of the compute that the exchange would have to hide behind for the
    model to meet it (derived, not chosen; over 100% cannot be met by hiding alone)."""
    s = dict(PUBLISHED_SETUP, **(setup or {}))
    net = PRESETS[s["network"]]
    p = s["gpus"]
    out = []
    for m in PUBLISHED:
        n = m["params"] * 4
        t_c = s["batch_per_gpu"] / m["img_per_s"]
        rings = max(1, math.ceil(n / s["fusion_bytes"]))
        t_ex = (costmodel.predict("ring", n, p, rings * net.alpha, net.beta, s["gamma"]))
        eff = t_c / (t_c + t_ex)
        need = (t_ex - (t_c / m["published"] - t_c)) / t_c
        out.append({"model": m["model"], "gradient_MB": n / 1e6, "compute_s": t_c,
                    "exchange_s": t_ex, "model_efficiency_no_overlap": eff,
                    "published_efficiency": m["published"],
                    "difference_points": (eff - m["published"]) * 100,
                    "window_needed": max(0.0, need)})
    return out
