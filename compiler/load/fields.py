"""Every hardware and engine field in one table: name, unit, role, default and its source,
whether a hardware block may set it, whether it may be 0, and whether every shipped
hardware file carries it (the uniform catalogue).

The hardware parser (compiler/load/hardware.py), the `--set` checks (backend/runner.py,
exports/cli/common.py), engine profiles (compiler/load/engine_profiles.py), the
workbook's input rows and Hardware sheet (exports/workbook/), `infest list` and
calibration's parameters and their defaults (compiler/analyses/calibrate.py, fit.py) all
read this table. Adding a field is one
entry here (and its value in each shipped file, if `catalogue`).

A compute peak of 0 means the GPU has no tensor-core math in that format: the forms then
run the op at the next format the hardware computes in (compiler/core/dtypes.py
peak_chain), and the output says so. A measured ceiling of 0 means "not measured": the
efficiency falls back to its default.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from infest.dsl.units import BANDWIDTH, BYTES, COUNT, FLOPS_RATE, FREQUENCY, TIME

# The base unit each dimension is stored in (what --json and the workbook's base column say).
BASE_UNITS = {BYTES: "bytes", BANDWIDTH: "bytes/s", TIME: "s", FLOPS_RATE: "FLOP/s",
              FREQUENCY: "Hz", COUNT: ""}
ROLES = ("memory", "compute", "launch", "link", "network", "host", "measured", "efficiency",
         "estimate", "offload", "descriptive")


@dataclass(frozen=True)
class Field:
    """One field: how it is written, checked, defaulted and documented."""

    name: str
    dimension: str | None     # dsl.units dimension of its unit (None: any)
    role: str                 # one of ROLES
    doc: str
    default: Fraction | None = None  # the value when a block does not give it (None: none)
    source: str = ""          # where the default comes from (said in docs and messages)
    hardware: bool = True     # a hardware block may set it
    zero: bool = False        # may be 0 (a latency; "none" for a peak or a measured ceiling)
    catalogue: bool = True    # every shipped hardware file gives it
    unit_ratio: bool = False  # a ratio in (0, 1] (an efficiency; [0, 1] where `zero`)
    at_least: Fraction | None = None  # the least value it may take (None: positive)

    @property
    def unit(self) -> str:
        """The base unit of its value."""
        return BASE_UNITS.get(self.dimension or "", "")


_NO_MATH = Fraction(0)
_NO_MATH_SOURCE = ("not given: no tensor-core math in this format; its ops run at the next "
                   "format the hardware computes in (weight-only), said in the output")


def _peak(fmt: str, doc: str, zero: bool = True) -> Field:
    return Field(f"flops_{fmt}", FLOPS_RATE, "compute", f"peak dense {doc} math",
                 _NO_MATH if zero else None, _NO_MATH_SOURCE if zero else "", zero=zero)


# Efficiencies: achievable ceiling / datasheet ceiling, in (0, 1]. The estimate divides
# each bound term by its efficiency (compiler/core/terms.py), so it never beats the bound
# (a step with comm_overlap may beat the serial roofline, never the overlap floor).
# - eff_mem 0.8: the HBM derate performance tools in use apply; a pure device-to-device
#   copy reaches more (~4.3 of 4.8 TB/s = 0.9 measured on one H200 through PyTorch), a
#   decode step's many smaller reads less. 0.8 is an assumption between the two.
# - eff_flops 0.7: an 8192^3 bf16 matmul reaches ~790 of 989 TFLOP/s (0.8, measured on one
#   H200, random data); inference GEMMs are smaller and skinnier. 0.7 is an assumption.
# - eff_link 0.8: an assumption: NCCL ring all-reduce bus bandwidth on NVLink reaches
#   roughly 0.8 of the link's datasheet speed at large messages; it also derates the
#   per-call latency (the whole collective time is divided by it).
# A hardware whose measured ceilings are non-zero (mem_bw_measured, flops_bf16_measured)
# gets measured / datasheet instead; an eff_* field wins over both. `infest calibrate`
# fits all three to measured step times.
FIELD_TABLE = (
    Field("mem_capacity", BYTES, "memory",
          "device memory the driver exposes (nvidia-smi's memory.total; vendors' \"GB\" "
          "of HBM count GiB)"),
    Field("mem_bw", BANDWIDTH, "memory", "device memory (HBM) bandwidth"),
    _peak("bf16", "bf16", zero=False),   # the peak every fallback ends at
    _peak("fp16", "fp16"),
    _peak("fp8", "fp8"),
    _peak("fp4", "fp4"),
    _peak("int8", "int8"),
    _peak("tf32", "tf32"),
    _peak("fp32", "fp32"),
    Field("sms", COUNT, "launch", "streaming multiprocessors (compute units): the estimate "
          "runs a GEMM's tiles in waves of them", Fraction(1), "not given: 1, every GEMM tile "
          "its own wave (no wave quantization), said in the estimate's line; every shipped "
          "GPU gives its own"),
    Field("clock", FREQUENCY, "launch", "SM boost clock: sms x clock x sm_bytes_per_cycle "
          "caps what an engine's memory-bound kernels stream (estimate)", Fraction(0),
          "not given: 0, no per-SM ceiling on memory-bound kernels, said in the estimate's "
          "line; every shipped GPU gives its own or says why 0", zero=True),
    Field("launch_overhead", TIME, "launch", "smallest time any kernel takes", zero=True),
    Field("link_bw", BANDWIDTH, "link", "GPU-to-GPU link inside a node, one GPU, one direction"),
    Field("link_latency", TIME, "link", "time per collective call inside a node", zero=True),
    Field("gpus_per_node", COUNT, "link", "GPUs joined by the link"),
    Field("nvls", COUNT, "link", "NVLink SHARP: 1 where the node's switch reduces and "
          "multicasts, so an all-reduce inside the node moves its buffer once per GPU, "
          "not a ring's 2(n-1)/n times; between 0 and 1, the share of that saving engines get",
          Fraction(0), "not given: 0, ring all-reduce only; every shipped file gives its "
          "own (1 on third- and fourth-generation NVSwitch nodes)", zero=True,
          unit_ratio=True),
    Field("net_bw", BANDWIDTH, "network", "network between nodes, one GPU, one direction "
          "(0: no network; a group must fit one node)", zero=True),
    Field("net_latency", TIME, "network", "time per collective call between nodes", zero=True),
    Field("host_bw", BANDWIDTH, "host", "GPU-to-host (CPU memory) link, one direction"),
    Field("host_capacity", BYTES, "host", "host (CPU) memory for offload"),
    Field("mem_bw_measured", BANDWIDTH, "measured", "measured copy bandwidth (0: not measured)",
          _NO_MATH, "not measured: eff_mem keeps its default", zero=True),
    Field("flops_bf16_measured", FLOPS_RATE, "measured",
          "measured large bf16 matmul rate (0: not measured)", _NO_MATH,
          "not measured: eff_flops keeps its default", zero=True),
    Field("eff_mem", COUNT, "efficiency", "achievable share of mem_bw (estimate)",
          Fraction(4, 5), "assumption: the HBM derate performance tools apply",
          catalogue=False, unit_ratio=True),
    Field("eff_flops", COUNT, "efficiency", "achievable share of every flops_* peak (estimate)",
          Fraction(7, 10), "assumption: below a large bf16 GEMM's ~0.8 of datasheet",
          catalogue=False, unit_ratio=True),
    Field("eff_link", COUNT, "efficiency",
          "achievable share of link and network speed (estimate)", Fraction(4, 5),
          "assumption: NCCL ring bus bandwidth on NVLink", catalogue=False, unit_ratio=True),
    # The estimate's own parameters (compiler/forms/estimate.py): like the efficiencies, a
    # hardware block, an engine profile (specs/engines/*.json) or --set gives them; they
    # enter the estimate only, never a bound. Defaults fitted to aiconfigurator 0.12.0's
    # kernel tables (aiconfigurator-core 0.12.0, TensorRT-LLM 1.3.0rc20 database, H100 and
    # H200 SXM; bench/kernel_fit.py writes the numbers and their residuals) unless said.
    Field("eff_attn", COUNT, "estimate",
          "achievable share of peak FLOP/s of attention kernels (FlashAttention class)",
          Fraction(12, 25), "aiconfigurator 0.12.0 context attention, 32/8 heads d128 bf16: "
          "median 48% (41-55%) of 989 TFLOP/s at 4k-16k tokens, H100 and H200 "
          "(bench/kernel_fit.py)", catalogue=False, unit_ratio=True),
    Field("eff_kv", COUNT, "estimate",
          "achievable share of mem_bw of attention kernels (decode: reading the KV cache)",
          Fraction(87, 100), "aiconfigurator 0.12.0 generation attention, 32/8 heads d128 bf16: "
          "median 87% (76-91%) of HBM bandwidth at KV reads over 500 MB, H100 and H200 "
          "(bench/kernel_fit.py)", catalogue=False, unit_ratio=True),
    Field("kernel_latency", TIME, "estimate",
          "fixed time each kernel adds in the estimate (launch, ramp-up, tail)",
          Fraction(43, 10_000_000), "aiconfigurator 0.12.0 bf16 GEMMs at M <= 128 on "
          "H100/H200: 4.3 us + weight bytes / (0.82 x HBM bandwidth), worst residual 14% "
          "(bench/kernel_fit.py)", zero=True, catalogue=False),
    Field("coll_latency", TIME, "estimate",
          "fixed time an engine's collective call adds to the bound's per-call floor "
          "(link_latency, net_latency)", Fraction(3, 1_000_000),
          "aiconfigurator 0.12.0 NCCL all-reduce <= 64 KiB on H100/H200 at 2, 4, 8 GPUs: "
          "5.0 us a call, their 2 us link_latency + 3.0 us (bench/kernel_fit.py)", zero=True,
          catalogue=False),
    Field("coll_step_latency", TIME, "estimate",
          "latency of each ring step of a collective (all-reduce: 2(n-1) steps)",
          Fraction(86, 100_000_000), "aiconfigurator 0.12.0 NCCL all-reduce <= 64 KiB on "
          "H100/H200 at 2, 4, 8 GPUs: 5.0 us + 0.86 us x 2(n-1), worst residual 16% "
          "(bench/kernel_fit.py); engine profiles carry their own, fitted to their rows",
          zero=True, catalogue=False),
    Field("gemm_tile_m", COUNT, "estimate",
          "GEMM tile rows: M rows pad up to a whole number of tiles (decode's M = batch)",
          Fraction(64), "Hopper wgmma: 64 rows per warpgroup MMA, the smallest tile CUTLASS "
          "and cuBLAS use", catalogue=False),
    Field("gemm_tile_n", COUNT, "estimate",
          "GEMM tile columns: N columns pad up to whole tiles; tiles run in waves of the "
          "GPU's sms", Fraction(128), "CUTLASS's Hopper (SM90) GEMM examples and unit tests: "
          "TileShape Shape<_128,_128,_64>, 128 columns per tile", catalogue=False),
    Field("sm_bytes_per_cycle", COUNT, "estimate",
          "bytes an engine's memory-bound kernels move per SM per clock cycle at most: "
          "with sms and clock a ceiling beside eff_mem x mem_bw", Fraction(32),
          "below the L2's 5,120 bytes per clock over 108 SMs (47 per SM, A100 whitepaper): "
          "at 32 it binds on no shipped GPU at the default efficiencies; llama.cpp's f16 "
          "mat-vec decode reaches ~5.5 by hand, 6.8 fitted beside its kernel latency "
          "(specs/engines/llamacpp.json)", catalogue=False),
    Field("moe_skew", COUNT, "estimate",
          "routing skew: scales the busiest expert-parallel rank's excess load over the "
          "mean (1: uniform routing; 0: perfectly balanced)", Fraction(1),
          "busiest of E binomial loads ~ mean + sqrt(2 mean ln E) (uniform routing)",
          zero=True, catalogue=False),
    Field("step_overhead", TIME, "estimate",
          "per-step engine overhead: scheduling, sampling, host work (step.t_overhead_s)",
          Fraction(0), "0 unless an engine profile sets it (never part of a bound)",
          zero=True, catalogue=False),
    Field("comm_overlap", COUNT, "estimate",
          "share of the collectives hidden behind compute: a step's estimate loses "
          "comm_overlap x min(its collectives' part, the rest) (1: two-batch overlap, "
          "SGLang --enable-two-batch-overlap, the step takes its longer side)", Fraction(0),
          "0: collectives run between the kernels they feed (serial), unless a run says "
          "it overlaps them", zero=True, catalogue=False, unit_ratio=True),
    Field("request_overhead", TIME, "estimate",
          "per-request overhead added to TTFT (tokenising, admission, first stream)",
          Fraction(0), "0 unless an engine profile sets it (never part of a bound)",
          zero=True, catalogue=False),
    # What an engine gives its KV cache (memory.engine_max_batch: serve's, plan's and the
    # workbook's admission), KV_ROOM below; memory.max_batch keeps the whole memory, the
    # bound.
    Field("mem_fraction", COUNT, "estimate",
          "share of the GPU's memory the engine lets weights and KV cache fill (vLLM "
          "--gpu-memory-utilization, 0.9 by default; SGLang --mem-fraction-static)",
          Fraction(1), "1: all of it, as memory.max_batch (an engine profile sets its own)",
          catalogue=False, unit_ratio=True),
    Field("kv_free_fraction", COUNT, "estimate",
          "share of the memory left beside the weights that the engine gives its KV cache "
          "(TensorRT-LLM's free_gpu_memory_fraction, 0.9 by default)", Fraction(1),
          "1: all of it, as memory.max_batch (an engine profile sets its own)",
          catalogue=False, unit_ratio=True),
    Field("mem_reserve", BYTES, "estimate",
          "memory per GPU the engine keeps beside weights and KV cache: CUDA context, "
          "NCCL buffers, activation workspace, CUDA graphs (vLLM's start-up log: non-torch "
          "memory + activation peak, + CUDA graph memory where it prints it); taken inside "
          "mem_fraction",
          Fraction(0), "0: none kept back (engine_max_batch errs high; a run's log gives "
          "its own)", zero=True, catalogue=False),
    Field("poll_interval", COUNT, "estimate",
          "decode steps between the scheduler's looks for new requests: a request arriving "
          "during decode waits for the next look (SGLang --scheduler-recv-interval k, "
          "--num-continuous-decode-steps k)", Fraction(1),
          "1: vLLM, TensorRT-LLM and SGLang's default look before every step (never part "
          "of a bound)", catalogue=False, at_least=Fraction(1)),
    # Describe a Grace CPU beside the GPU (GH200); no form uses them, so other GPUs leave
    # them out rather than carry an invented figure.
    Field("host_mem_bw", BANDWIDTH, "descriptive", "host (CPU) memory bandwidth",
          catalogue=False),
    Field("host_flops_fp32", FLOPS_RATE, "descriptive", "host (CPU) fp32 peak", catalogue=False),
    # Offload inputs (compiler/passes/offload.py): per model, never a hardware's.
    Field("gpu_experts", COUNT, "offload", "routed experts per MoE layer held in HBM",
          source="default: all of them (no offload)", hardware=False, zero=True,
          catalogue=False),
    Field("hit_rate", COUNT, "offload", "measured expert-cache hit rate",
          source="default: 0 (no measured hits)", hardware=False, zero=True, catalogue=False),
)
FIELDS: dict[str, Field] = {f.name: f for f in FIELD_TABLE}
if len(FIELDS) != len(FIELD_TABLE) or any(f.role not in ROLES for f in FIELD_TABLE):
    raise ImportError("fields: a name twice or an unknown role in FIELD_TABLE")

HARDWARE_FIELDS = tuple(f.name for f in FIELD_TABLE if f.hardware)
CATALOGUE = tuple(f.name for f in FIELD_TABLE if f.catalogue)
EFFICIENCIES = {f.name: f.default for f in FIELD_TABLE if f.role == "efficiency"}
# Every parameter of the estimate and its default: the efficiencies, then the estimate's
# own (what a hardware, an engine profile or --set may give; calibration fits them).
ESTIMATE_DEFAULTS = {f.name: f.default for f in FIELD_TABLE if f.role in ("efficiency", "estimate")}
# What an engine gives its KV cache (memory.engine_max_batch): shares of memory, not speed,
# and the bytes it keeps back; KV_ROOM is all three (each neutral at its default).
KV_SHARES = ("mem_fraction", "kv_free_fraction")
KV_ROOM = KV_SHARES + ("mem_reserve",)
# Ratios in (0, 1]: the efficiencies, eff_attn, eff_kv and KV_SHARES; comm_overlap in [0, 1].
SHARES = frozenset(f.name for f in FIELD_TABLE if f.unit_ratio)
# Fields with a least value above 0 (poll_interval: a look every step at most).
AT_LEAST = {f.name: f.at_least for f in FIELD_TABLE if f.at_least is not None}
# efficiency -> (measured ceiling, datasheet ceiling): measured / datasheet when measured.
MEASURED = {"eff_mem": ("mem_bw_measured", "mem_bw"),
            "eff_flops": ("flops_bf16_measured", "flops_bf16")}
MAY_BE_ZERO = frozenset(f.name for f in FIELD_TABLE if f.zero)
REQUIRED = ("mem_capacity", "mem_bw", "launch_overhead")  # every hardware block, shipped or not
# Defaults a hardware block inherits when it leaves a field out (peaks it lacks are 0).
HARDWARE_DEFAULTS = {f.name: f.default for f in FIELD_TABLE
                     if f.hardware and f.default is not None
                     and f.role not in ("efficiency", "estimate")}
