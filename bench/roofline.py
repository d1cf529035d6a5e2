"""How far a batched decode step of the local engine is from this machine's limit: a measured roofline, the
step's floor on it, and the engine's real step, as a fraction.

**The machine.** Sustained memory bandwidth, stream-style, with torch on the threads the engine uses: copy
(``a = b``, 8 bytes moved per float), triad (``a = b + s*c``, 12) and read (``sum(b)``, 4) over arrays of
``--stream-mb`` (default: twice the largest cache the kernel reports, so the arrays cannot stay cached); median of
``--repeats``. Matmul throughput in float32 and bfloat16: a large square product (the peak), and every product a
decode step of the model does (below), in both dtypes, each timed hot: the same operands again and again, and of a
product whose right operand exceeds 1 MiB only a part (fewer of its batched products, at least 4, or fewer output
columns of a single one), so that the figure is the kernel's arithmetic at that shape, its call overhead included, not
memory traffic (memory is the bandwidth's term).

**The floor of one decode step**, for ``--rows`` rows that share a ``--prefix``-token prefix and each have their
own ``--suffix`` tokens (comma-separated: the rows take the lengths in turn). The step's products, each over all
layers, with the bytes it must read and the FLOPs it must do:

- *layers' linear*: per layer q, k, v, o, gate, up, down, ``[rows, in] @ [in, out]``; reads every weight once per
  step, counted in the compute dtype (bf16: 2 bytes; the engine keeps float32 weights that autocast casts at
  every call, which reads more: a floor counts what must be read, and keeping bf16 copies is allowed);
- *head*: the vocabulary projection, always in float32 (``muarl.models.logits``: the sampler's log-probabilities
  must be the trainer's); reads the whole ``vocab x hidden`` matrix;
- *attention, shared prefix*: scores and values over the prefix for all rows at once, per key-value head a true
  matmul ``[rows * group, head_dim] @ [head_dim, prefix]`` (group = query heads per key-value head); reads the
  prefix's keys and values ONCE per step;
- *attention, rows' own*: each row over its own suffix, ``[group, head_dim] @ [head_dim, suffix]`` batched over
  rows and key-value heads; reads each row's own keys and values.

Keys and values are stored in the compute dtype (the engine's caches hold bf16 under autocast). Softmax, norms,
rotary embedding, sampling and activations are left out: they read and write a few rows of numbers, not the
weights or the cache. Each part's floor is ``max(bytes / bandwidth, sum of its products' FLOPs / their
throughput)``: inside a part, memory and arithmetic can overlap; the parts run one after another (layer by layer,
product by product, as the eager forward does), so the step's floor is their SUM. The bandwidth is the best of the
three stream figures and each throughput the one measured at that product's shape, so the floor leans low. Also
reported: the hard bound ``max(all bytes / bandwidth, all FLOPs / peak)`` (the machine's roofline if every part
overlapped perfectly and every shape ran at the peak), and the floor of a design that reads the prefix once per
row (``per_row``: today's engine, where every row holds its own padded copy of the prefix), to show what sharing
can win. The fraction is ``floor (shared) / measured step``: 1.0 would be at the machine's limit.

**The engine's step** is the real one, built the way rollouts build it, so whatever the engine of ``--src`` does is
what is timed: a ``LocalPolicy`` (``--model``, bf16 autocast or float32); each row started as a session starts
(the prefix prefilled once, then shared or copied as the engine does), a ``GenerationRequest`` feeding the row's suffix
through the policy's ``BatchedGenerator`` (its admission prefills the suffix on the row's cache and joins the rows
into its batch), then decode steps until every row has sampled its budget. The generator's stop ids are emptied so
that every row runs to its budget and every timed step has the whole batch; the first ``--warmup`` steps and the
last (where rows leave the batch) are not timed; the figure is the median of ``--steps`` steps. Token ids are
seeded random ones (the content does not change the arithmetic).

``--src PATH`` times the engine of another ``src`` tree (in a child process); ``--compare OLD_SRC`` times that tree
and this one, alternating ``--rounds`` times (``engine_arms``), against the same measured machine.

    nice -n 19 python bench/roofline.py [--rows 64 --prefix 2500 --suffix 300 --precision bf16 --threads 2]
    git archive HEAD~3 src | tar -x -C /tmp/old && python bench/roofline.py --compare /tmp/old/src
    python bench/roofline.py --profile      # and torch's profile of the timed steps, by op and shape, on stderr
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

import argparse
import asyncio
import json
import math
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

import engine_arms
from muarl.models.hf_loading import load_causal_lm

BYTES = {"bf16": 2, "fp32": 4}
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
HOT_BYTES = 2**20  # a right operand this large stays in the L2 caches of the cores splitting the product


# ---------------------------------------------------------------------------- the floor (pure arithmetic)
@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def of(cls, config: object) -> ModelShape:
        """From a transformers Llama-family config."""
        heads = config.num_attention_heads
        return cls(layers=config.num_hidden_layers, hidden=config.hidden_size, heads=heads,
                   kv_heads=getattr(config, "num_key_value_heads", None) or heads,
                   head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
                   intermediate=config.intermediate_size, vocab=config.vocab_size)


@dataclass(frozen=True)
class Product:
    """One kind of matmul of a decode step, over all layers: ``[batch, m, k] @ [batch, k, n]``, done ``count`` times
    (layers, or layers x key-value heads), with the bytes it must read from memory and the FLOPs it must do in all.
    ``b_rows_are_n``: the right operand is stored ``[n, k]`` (a weight as ``nn.Linear`` keeps it, or keys)."""

    name: str
    part: str
    batch: int
    m: int
    k: int
    n: int
    dtype: str
    b_rows_are_n: bool
    bytes: float
    flops: float

    @property
    def key(self) -> str:
        """Products with the same key run the same kernel on the same shape: one measurement serves them all."""
        return f"{self.dtype} {self.batch}x[{self.m}x{self.k}]@[{self.k}x{self.n}]{'T' if self.b_rows_are_n else ''}"


LINEAR, HEAD, SHARED, OWN = "layers' linear", "head", "attention: shared prefix", "attention: rows' own"


def decode_products(shape: ModelShape, rows: int, prefix: int, suffixes: Sequence[int], precision: str,
                    shared: bool) -> list[Product]:
    """The products of one decode step (module docstring). ``suffixes``: each row's own length (the timed shape of
    the per-row products uses their mean). ``shared``: the prefix's keys and values are read once for all rows;
    otherwise every row attends over its own copy of prefix + suffix."""
    s, L, b = shape, shape.layers, BYTES[precision]
    group = s.heads // s.kv_heads
    products = [
        Product(name, LINEAR, 1, rows, k, n, precision, True, L * k * n * b, L * 2 * rows * k * n)
        for name, k, n in (("q", s.hidden, s.heads * s.head_dim), ("k", s.hidden, s.kv_heads * s.head_dim),
                           ("v", s.hidden, s.kv_heads * s.head_dim), ("o", s.heads * s.head_dim, s.hidden),
                           ("gate", s.hidden, s.intermediate), ("up", s.hidden, s.intermediate),
                           ("down", s.intermediate, s.hidden))
    ]
    products.append(Product("head", HEAD, 1, rows, s.hidden, s.vocab, "fp32", True,
                            s.hidden * s.vocab * BYTES["fp32"], 2 * rows * s.hidden * s.vocab))
    kv_bytes_per_token = L * s.kv_heads * s.head_dim * b  # keys (or values) of one token, every layer
    own = [n + (0 if shared else prefix) for n in suffixes]  # what each row attends over on its own
    typical = round(sum(own) / len(own))
    if shared:
        flops = L * 2 * rows * s.heads * s.head_dim * prefix
        products += [
            Product("prefix scores", SHARED, s.kv_heads, rows * group, s.head_dim, prefix, precision, True, prefix * kv_bytes_per_token, flops),
            Product("prefix values", SHARED, s.kv_heads, rows * group, prefix, s.head_dim, precision, False, prefix * kv_bytes_per_token, flops),
        ]
    flops = L * 2 * s.heads * s.head_dim * sum(own)
    products += [
        Product("own scores", OWN, rows * s.kv_heads, group, s.head_dim, typical, precision, True, sum(own) * kv_bytes_per_token, flops),
        Product("own values", OWN, rows * s.kv_heads, group, typical, s.head_dim, precision, False, sum(own) * kv_bytes_per_token, flops),
    ]
    return products


def step_floor(products: Sequence[Product], bandwidth: float, throughput: dict[str, float],
               peak: dict[str, float]) -> dict:
    """The floor of a step made of ``products`` (module docstring): per part ``max(bytes / bandwidth, sum of FLOPs /
    throughput[product.key])``, summed over parts; and the hard bound ``max(bytes / bandwidth, sum of FLOPs /
    peak[dtype])`` over the whole step. Bandwidth in bytes/s, throughputs in FLOP/s."""
    parts: dict[str, dict] = {}
    for p in products:
        part = parts.setdefault(p.part, {"bytes": 0.0, "flops": 0.0, "compute_seconds": 0.0})
        part["bytes"] += p.bytes
        part["flops"] += p.flops
        part["compute_seconds"] += p.flops / throughput[p.key]
    for part in parts.values():
        part["memory_seconds"] = part["bytes"] / bandwidth
        part["floor_seconds"] = max(part["memory_seconds"], part["compute_seconds"])
        part["bound_by"] = "memory" if part["memory_seconds"] >= part["compute_seconds"] else "compute"
    return {
        "parts": parts,
        "floor_seconds": sum(part["floor_seconds"] for part in parts.values()),
        "bound_seconds": max(sum(p.bytes for p in products) / bandwidth, sum(p.flops / peak[p.dtype] for p in products)),
        "bytes": sum(p.bytes for p in products), "flops": sum(p.flops for p in products),
    }


# ---------------------------------------------------------------------------- the machine (measured)
def call_seconds(fn: Callable[[], object], repeats: int, min_seconds: float) -> float:
    """Median seconds of one ``fn()`` call: ``repeats`` timings of enough calls to last ``min_seconds`` each."""
    fn()
    t0 = time.perf_counter()
    fn()
    calls = max(1, math.ceil(min_seconds / max(time.perf_counter() - t0, 1e-9)))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def largest_cache_bytes() -> int | None:
    """The largest CPU cache the kernel reports (its size as seen by this machine, e.g. a VM's L3)."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip()
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1], 1)
        sizes.append(int(text.rstrip("KMG")) * unit)
    return max(sizes) if sizes else None


def stream_bandwidth(megabytes: int, repeats: int) -> dict[str, float]:
    """Bytes/s of copy, triad and read over float32 arrays of ``megabytes`` each (median of ``repeats``)."""
    n = megabytes * 2**20 // 4
    a, b, c = torch.empty(n), torch.full((n,), 1.0), torch.full((n,), 2.0)
    kernels = {"copy": (lambda: a.copy_(b), 8 * n), "triad": (lambda: torch.add(b, c, alpha=3.0, out=a), 12 * n),
               "read": (lambda: b.sum(), 4 * n)}
    return {name: moved / call_seconds(fn, repeats, 0.0) for name, (fn, moved) in kernels.items()}


def hot_part(p: Product) -> tuple[int, int]:
    """(batch, n) of the part of ``p`` that is timed: all of it when its right operand fits in ``HOT_BYTES``, else
    fewer batch entries (each is the same product on other numbers), or fewer output columns of a single product, so
    that the operands stay in the cores' caches and the time is arithmetic, not memory traffic (a batched product stays
    a batched one: a single ``[m, k] @ [k, n]`` takes another kernel)."""
    per_column = p.k * BYTES[p.dtype]
    if p.batch > 1:  # at least 4: over 1 or 2, the call's own overhead would weigh far more than in the whole product
        return max(min(p.batch, 4), min(p.batch, HOT_BYTES // (per_column * p.n))), p.n
    return 1, max(min(p.n, 64), min(p.n, HOT_BYTES // per_column))


def product_throughput(p: Product, repeats: int, min_seconds: float, hot: bool = True) -> float:
    """FLOP/s of ``p``'s matmul at its dtype and shape (``hot``: of its :func:`hot_part`), the same operands every call."""
    batch, n = hot_part(p) if hot else (p.batch, p.n)
    g = torch.Generator().manual_seed(0)
    dtype = DTYPES[p.dtype]
    a = torch.randn(batch, p.m, p.k, generator=g).to(dtype)
    b = torch.randn(batch, *((n, p.k) if p.b_rows_are_n else (p.k, n)), generator=g).to(dtype)
    if p.batch == 1:  # a plain 2-D product, as nn.Linear runs it
        a, b = a[0], b[0]
    right = b.mT if p.b_rows_are_n else b
    return 2 * batch * p.m * p.k * n / call_seconds(lambda: torch.matmul(a, right), repeats, min_seconds)


def peak_throughput(size: int, repeats: int, min_seconds: float) -> dict[str, float]:
    """FLOP/s of a ``size``-cubed product per dtype: the machine's arithmetic peak as torch reaches it."""
    return {dtype: product_throughput(Product("peak", "", 1, size, size, size, dtype, True, 0, 0), repeats, min_seconds, hot=False)
            for dtype in DTYPES}


def machine_info() -> dict:
    """CPU model and the flags that decide the kernels, threads, torch."""
    model, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
    return {"cpu": model, "flags": [f for f in wanted if f in flags], "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
            "largest_cache_bytes": largest_cache_bytes(), "platform": platform.platform(), "torch": torch.__version__}


# ---------------------------------------------------------------------------- the engine's step (measured)
def token_ids(tokenizer: object, vocab: int, count: int, seed: int) -> list[int]:
    """``count`` seeded random ids of ordinary tokens."""
    special = set(tokenizer.all_special_ids)
    ordinary = [i for i in range(min(vocab, 20_000)) if i not in special]
    return random.Random(seed).choices(ordinary, k=count)


def suffix_lengths(args: argparse.Namespace) -> list[int]:
    lengths = [int(n) for n in str(args.suffix).split(",")]
    if any(n < 1 for n in lengths) or args.prefix < 1:
        raise SystemExit("--prefix and every --suffix length must be at least 1")
    return [lengths[r % len(lengths)] for r in range(args.rows)]


def session_request(policy: Any, prefix: list[int], feed: list[int], budget: int, seed: int) -> Any:
    """A row's first turn as a session starts it (``LocalSession._system_turn``: a shared prefix the row continues, or
    a cache holding a copy of it, whichever the engine under test does), then ``feed`` to prefill and decode."""
    from muarl.models.batched_generation import GenerationRequest
    from muarl.models.local_engine import LocalSession

    session = LocalSession(policy, [], seed)
    session._system_turn(prefix)
    shared = {"prefix": session._prefix} if getattr(session, "_prefix", None) is not None else {}  # engines with prefix-shared attention
    return GenerationRequest(cache=session._cache if session._cache is not None else policy.kv_cache(), feed=feed, budget=budget,
                             generator=torch.Generator().manual_seed(seed), **shared)


def profile_steps(generator: Any, warmup: int, steps: int) -> None:
    """Run the timed decode steps under torch's profiler and print its table of ops by self CPU time to stderr
    (``--profile``): which kernels the step's time beyond its floor is spent in. The profiler adds its own
    overhead to every op, so the step times of a profiled run are not the bench's figure."""
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
    inner, calls = generator._decode_step, [0]

    def profiled(*a: object) -> object:
        calls[0] += 1
        if calls[0] == warmup + 1:
            profiler.__enter__()
        try:
            return inner(*a)
        finally:
            if calls[0] == warmup + steps:
                profiler.__exit__(None, None, None)
                table = profiler.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=30)
                print(f"torch profile of {steps} decode steps:\n{table}", file=sys.stderr)

    generator._decode_step = profiled


def measure_step(args: argparse.Namespace) -> dict:
    """The engine's decode step on the bench's shape (module docstring), with the engine importable here."""
    from muarl.models import kv_cache
    from muarl.models.local_engine import LocalPolicy, SamplingConfig

    model, tokenizer = load_causal_lm(args.model)
    model.eval()
    policy = LocalPolicy(model, tokenizer, "chatml-hermes", SamplingConfig(temperature=1.0, bf16=args.precision == "bf16"),
                         max_batch_rows=args.rows)
    generator = policy.generator
    generator.stop_ids = set()  # every row samples its whole budget: each timed step has the whole batch
    seconds: dict[str, list[float]] = {"_decode_step": [], "_admit": []}
    for name, times in seconds.items():
        inner = getattr(generator, name)

        def timed(*a: object, _inner: Callable = inner, _times: list = times) -> object:
            t0 = time.perf_counter()
            try:
                return _inner(*a)
            finally:
                _times.append(time.perf_counter() - t0)

        setattr(generator, name, timed)
    if args.profile:
        profile_steps(generator, args.warmup, args.steps)
    suffixes = suffix_lengths(args)
    prefix = token_ids(tokenizer, model.config.vocab_size, args.prefix, seed=0)
    budget = args.warmup + args.steps + 2  # a token at admission, warm-up and timed steps, a last step where rows leave
    requests = [session_request(policy, prefix, token_ids(tokenizer, model.config.vocab_size, n, seed=1 + r), budget, r)
                for r, n in enumerate(suffixes)]

    async def decode() -> None:
        await asyncio.gather(*(generator.generate(request) for request in requests))

    asyncio.run(decode())
    stats = generator.stats
    if stats.decoded_rows != args.rows * stats.decode_steps:
        raise SystemExit(f"the engine did not decode all {args.rows} rows in every step ({stats.decoded_rows} rows in "
                         f"{stats.decode_steps} steps): the step timed is not the shape asked for")
    timed_steps = seconds["_decode_step"][args.warmup:args.warmup + args.steps]
    return {
        "engine": str(Path(kv_cache.__file__).resolve().parents[2]),
        "step_seconds": statistics.median(timed_steps), "timed_steps": [round(t, 5) for t in timed_steps],
        "admission_seconds": round(sum(seconds["_admit"]), 3), "decode_steps": stats.decode_steps, "prefills": stats.prefills,
    }


# ---------------------------------------------------------------------------- the report
def roofline(args: argparse.Namespace, shape: ModelShape) -> dict:
    """The measured machine, and this shape's floors on it (shared prefix and per-row design)."""
    cache = largest_cache_bytes() or 2**27
    stream = stream_bandwidth(args.stream_mb or max(256, 2 * cache // 2**20), args.repeats)
    bandwidth = max(stream.values())
    peak = peak_throughput(args.peak_size, args.repeats, args.min_seconds)
    suffixes = suffix_lengths(args)
    throughput: dict[str, float] = {}  # every product of both designs in both dtypes (the floors use the step's)
    for precision in ("bf16", "fp32"):
        for shared in (True, False):
            for p in decode_products(shape, args.rows, args.prefix, suffixes, precision, shared):
                if p.key not in throughput:
                    throughput[p.key] = product_throughput(p, args.repeats, args.min_seconds)
    designs = {design: decode_products(shape, args.rows, args.prefix, suffixes, args.precision, shared=design == "shared")
               for design in ("shared", "per_row")}
    return {
        "bandwidth_gb_s": {name: round(v / 1e9, 2) for name, v in stream.items()},
        "peak_gflop_s": {dtype: round(v / 1e9, 1) for dtype, v in peak.items()},
        "products_gflop_s": {key: round(v / 1e9, 1) for key, v in throughput.items()},
        "floors": {design: step_floor(products, bandwidth, throughput, peak) for design, products in designs.items()},
    }


def steps(args: argparse.Namespace, argv: list[str]) -> dict[str, list[dict]]:
    """Per engine arm, its measured steps: this tree in process, or ``--src`` / ``--compare`` trees in children."""
    if not (args.src or args.compare):
        return {"this": [measure_step(args)]}
    child = [*engine_arms.without_options(argv, "--src", "--compare", "--rounds"), "--step-only"]
    trees = engine_arms.compare_trees(args.compare) if args.compare else {"src": str(Path(args.src).resolve())}
    return engine_arms.alternate(__file__, child, trees, args.rounds if args.compare else 1)


def main() -> None:
    from muarl.models.precision import resolve_precision

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--rows", type=engine_arms.positive, default=64)
    p.add_argument("--prefix", type=int, default=2500, help="tokens every row shares")
    p.add_argument("--suffix", default="300", help="each row's own tokens: one length, or several, comma-separated, taken in turn")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto", help="bf16 autocast or float32 (auto: the engine's choice here)")
    p.add_argument("--threads", type=engine_arms.positive, help="torch threads (default: torch's, which the engine uses)")
    p.add_argument("--steps", type=engine_arms.positive, default=8, help="decode steps timed")
    p.add_argument("--warmup", type=int, default=1, help="decode steps run before the timed ones")
    p.add_argument("--repeats", type=engine_arms.positive, default=5, help="repetitions of every machine measurement (median)")
    p.add_argument("--min-seconds", type=float, default=0.2, help="least time one repetition of a matmul lasts")
    p.add_argument("--stream-mb", type=engine_arms.positive, help="MB per stream array (default: twice the largest cache, at least 256)")
    p.add_argument("--peak-size", type=engine_arms.positive, default=2048, help="side of the square matmul that measures the peak")
    p.add_argument("--src", help="time the engine of this src tree (in a child process)")
    p.add_argument("--profile", action="store_true", help="also print torch's profile of the timed steps (stderr; their times are then not the figure)")
    engine_arms.add_options(p, rounds=1)
    p.add_argument("--step-only", action="store_true", help=argparse.SUPPRESS)  # a child: the engine's step only
    args = p.parse_args()
    if args.src and args.compare:
        p.error("--src and --compare are two ways to choose the engines: give one")
    if args.warmup < 0:
        p.error("--warmup cannot be negative")
    args.precision = resolve_precision(args.precision)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.step_only:
        Path(args.json_out).write_text(json.dumps(measure_step(args)))
        return
    model, _ = load_causal_lm(args.model)
    shape = ModelShape.of(model.config)
    del model
    machine = roofline(args, shape)
    measured = steps(args, sys.argv[1:])
    step = {arm: statistics.median(r["step_seconds"] for r in runs) for arm, runs in measured.items()}
    floor = machine["floors"]["shared"]["floor_seconds"]
    print(json.dumps({
        "machine": machine_info(), "model": args.model, "shape": asdict(shape),
        "step": {"rows": args.rows, "prefix": args.prefix, "suffix": args.suffix, "precision": args.precision},
        **machine,
        "engines": measured, "median_step_seconds": step,
        "fraction_of_floor": {arm: round(floor / s, 3) for arm, s in step.items()},
        "fraction_of_per_row_floor": {arm: round(machine["floors"]["per_row"]["floor_seconds"] / s, 3) for arm, s in step.items()},
    }, indent=1))


if __name__ == "__main__":
    main()
