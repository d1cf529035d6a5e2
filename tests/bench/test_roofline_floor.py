"""The decode-step floor of ``bench/roofline.py``: its products' bytes and FLOPs and the floor's sum of per-part
maxima, against numbers worked out by hand for a toy shape."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def roofline():
    sys.path.insert(0, str(BENCH))  # the bench imports its sibling engine_arms
    try:
        spec = importlib.util.spec_from_file_location("roofline_bench", BENCH / "roofline.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))
        sys.modules.pop("roofline_bench", None)


# 2 layers, hidden 8, 2 query heads sharing 1 key-value head of 4, MLP 16, vocabulary 32
TOY = dict(layers=2, hidden=8, heads=2, kv_heads=1, head_dim=4, intermediate=16, vocab=32)
ROWS, PREFIX, SUFFIXES = 2, 10, [3, 5]


def by_part(products):
    parts = {}
    for p in products:
        bytes_, flops = parts.get(p.part, (0, 0))
        parts[p.part] = (bytes_ + p.bytes, flops + p.flops)
    return parts


def test_products_of_the_toy_step_by_hand(roofline):
    shape = roofline.ModelShape(**TOY)
    shared = roofline.decode_products(shape, ROWS, PREFIX, SUFFIXES, "bf16", shared=True)
    # linear: per layer q 64 + k 32 + v 32 + o 64 + gate 128 + up 128 + down 128 = 576 weights, 2 layers, 2 bytes each;
    # 2 FLOPs per weight per row. Head: 8 x 32 float32 weights. Keys (or values) of one token over both layers:
    # 2 layers x 1 head x 4 x 2 bytes = 16. Prefix: 10 tokens of keys and of values, once; each half does
    # 2 layers x 2 FLOPs x 2 rows x 2 heads x 4 x 10 = 640 FLOPs. Own: 3 + 5 = 8 tokens, 2 x 2 x 2 x 4 x 8 = 256 each.
    assert by_part(shared) == {
        roofline.LINEAR: (2304, 4608), roofline.HEAD: (1024, 1024),
        roofline.SHARED: (320, 1280), roofline.OWN: (256, 512),
    }
    per_row = roofline.decode_products(shape, ROWS, PREFIX, SUFFIXES, "bf16", shared=False)
    # every row attends over its own prefix + suffix: 13 + 15 = 28 tokens
    assert by_part(per_row) == {roofline.LINEAR: (2304, 4608), roofline.HEAD: (1024, 1024), roofline.OWN: (896, 1792)}
    shapes = {p.name: (p.batch, p.m, p.k, p.n, p.dtype) for p in shared}
    assert shapes["prefix scores"] == (1, 4, 4, 10, "bf16")  # per key-value head, the 2 rows x 2 query heads at once
    assert shapes["own values"] == (2, 2, 4, 4, "bf16")  # per row and key-value head, over the mean suffix (4)
    assert shapes["head"] == (1, 2, 8, 32, "fp32")
    fp32 = by_part(roofline.decode_products(shape, ROWS, PREFIX, SUFFIXES, "fp32", shared=True))
    assert fp32[roofline.LINEAR] == (4608, 4608) and fp32[roofline.SHARED] == (640, 1280)


def test_floor_sums_each_parts_slower_side(roofline):
    products = roofline.decode_products(roofline.ModelShape(**TOY), ROWS, PREFIX, SUFFIXES, "bf16", shared=True)
    throughput = {p.key: 1000.0 for p in products}
    peak = {"bf16": 1000.0, "fp32": 1000.0}
    floor = roofline.step_floor(products, bandwidth=400.0, throughput=throughput, peak=peak)
    # linear: 2304 B / 400 = 5.76 s > 4.608 s; head: 2.56 > 1.024; prefix: 0.8 < 1.28 (compute); own: 0.64 > 0.512
    assert floor["floor_seconds"] == pytest.approx(5.76 + 2.56 + 1.28 + 0.64)
    assert {name: part["bound_by"] for name, part in floor["parts"].items()} == {
        roofline.LINEAR: "memory", roofline.HEAD: "memory", roofline.SHARED: "compute", roofline.OWN: "memory"}
    # the hard bound: all 3904 bytes at 400 B/s (9.76 s) against all 7424 FLOPs at the peak (7.424 s)
    assert floor["bound_seconds"] == pytest.approx(9.76)
    # each product's own throughput counts: the float32 head at 256 FLOP/s takes 1024 / 256 = 4 s
    head = next(p for p in products if p.part == roofline.HEAD)
    slow_head = roofline.step_floor(products, 400.0, {**throughput, head.key: 256.0}, peak)
    assert slow_head["floor_seconds"] == pytest.approx(5.76 + 4 + 1.28 + 0.64)
    assert slow_head["parts"][roofline.HEAD]["bound_by"] == "compute"


def test_model_shape_from_a_config_without_head_dim(roofline):
    config = SimpleNamespace(num_hidden_layers=30, hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                             intermediate_size=1536, vocab_size=49152)
    assert roofline.ModelShape.of(config) == roofline.ModelShape(30, 576, 9, 3, 64, 1536, 49152)


def test_hot_part_keeps_the_right_operand_within_a_mebibyte(roofline):
    def product(batch, k, n, dtype):
        return roofline.Product("x", "part", batch, 64, k, n, dtype, True, 0, 0)

    # SmolLM2's float32 head: 576 x 4 bytes a column, 2**20 // 2304 = 455 of its 49,152 columns
    assert roofline.hot_part(product(1, 576, 49152, "fp32")) == (1, 455)
    # a row's keys over 2,800 positions, bf16: 64 x 2,800 x 2 = 358,400 bytes each, 2 fit, but at least 4 of the 192
    assert roofline.hot_part(product(192, 64, 2800, "bf16")) == (4, 2800)
    assert roofline.hot_part(product(192, 64, 300, "bf16")) == (27, 300)  # 2**20 // 38,400
    assert roofline.hot_part(product(3, 64, 300, "bf16")) == (3, 300)  # fits whole
    assert roofline.hot_part(product(1, 2**20, 4096, "fp32")) == (1, 64)  # never fewer than 64 columns
