"""A discrete-step serving simulator: a workload, the scheduler, and a step-time model.

Each engine instance repeats what a real engine does: ask its `Scheduler` for a
step, spend the time the cost model predicts for it, and update the requests.
Nothing runs a model, so a simulated hour of serving takes seconds. The cost model
is anything with `step_time(num_tokens, kv_tokens_read, attention_pairs)`:
`llmserve_ref.planning.roofline.StepCost` predicts it from a model and a GPU, at the
datasheet's peaks by default or at the `Efficiency` an engine measured
(`roofline.VLLM_H100`), which is what a simulation meant to size GPUs should use.

Instances come in pools. One pool serves requests start to finish (colocated);
with a second, `decode`, pool, the first only prefills and samples the first
token, then hands the request's KV cache to a decode instance after
`kv_transfer_time(prompt_len)` seconds (prefill/decode disaggregation,
DistServe, arXiv:2401.09670). A router sends each arrival to an instance of the
first pool: by default the one with the fewest unfinished requests, or as another
`llmserve_ref.planning.routing` policy decides (a hand-off goes to the least-loaded
decode instance). Requests that carry token ids share their prefixes through each
instance's own prefix cache, and a request whose `max_tokens` exceeds its `output_len`
stops after `output_len` tokens, its end of sequence. A config's `reservation` runs the
engine on contiguous regions (`llmserve_ref.planning.fragmentation.allocator`).

Time is simulated by always stepping the instance whose next step starts first,
after any arrival or hand-off due by then.

>>> from llmserve_ref.engine.scheduler_config import SchedulerConfig
>>> from llmserve_ref.planning.workload import RequestSpec
>>> class TenMsPerStep:
...     def step_time(self, num_tokens, kv_tokens_read, attention_pairs):
...         return 0.010
>>> pool = Pool(SchedulerConfig(token_budget=512, max_num_seqs=8), TenMsPerStep())
>>> result = simulate([RequestSpec("a", 0.0, prompt_len=100, output_len=5)], pool)
>>> m = result.requests[0]
>>> round(m.ttft, 3), round(m.tpot, 3), round(m.e2e_latency, 3)
(0.01, 0.01, 0.05)
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from llmserve_ref.engine.request import Request, RequestStatus
from llmserve_ref.engine.scheduler import Scheduler
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.planning.fragmentation import allocator
from llmserve_ref.planning.kv_math import KVFormat, kv_bytes_per_token
from llmserve_ref.planning.model_shape import ModelShape
from llmserve_ref.planning.routing import LeastLoaded, Router, least_loaded
from llmserve_ref.planning.slo import SLO
from llmserve_ref.planning.workload import RequestSpec


# --8<-- [start:cost]
class CostModel(Protocol):
    """Seconds one forward step takes; `llmserve_ref.planning.roofline.StepCost` is one."""

    def step_time(self, num_tokens: int, kv_tokens_read: int, attention_pairs: int) -> float: ...


@dataclass(frozen=True)
class Pool:
    """`num_instances` identical engine instances: a scheduler config and a cost model each."""

    config: SchedulerConfig
    cost: CostModel
    num_instances: int = 1


# --8<-- [end:cost]


# --8<-- [start:transfer]
def kv_transfer(
    cfg: ModelShape, link_bandwidth: float, kv_dtype: str | KVFormat = "bf16"
) -> Callable[[int], float]:
    """Seconds to send a prompt's KV cache over a link of `link_bandwidth` bytes/s, one way.

    >>> from llmserve_ref.planning.model_catalog import model
    >>> send = kv_transfer(model("Llama-3.1-8B").config, 50e9)  # 400 Gb/s RDMA
    >>> f"{send(4096) * 1e3:.1f} ms"  # 4096 tokens × 128 KiB
    '10.7 ms'
    """
    per_token = kv_bytes_per_token(cfg, kv_dtype)
    return lambda prompt_len: prompt_len * per_token / link_bandwidth


# --8<-- [end:transfer]


# --8<-- [start:metrics]
@dataclass(slots=True)
class RequestMetrics:
    """When one request arrived, got its first token and finished (simulated seconds)."""

    request_id: str
    arrival_time: float
    prompt_len: int
    output_len: int
    first_token_time: float = math.nan
    finish_time: float = math.nan
    num_preemptions: int = 0
    cached_tokens: int = 0  # prompt tokens found in the prefix cache when first admitted
    instance: int = -1  # where the router sent it

    @property
    def ttft(self) -> float:
        """Time to first token."""
        return self.first_token_time - self.arrival_time

    @property
    def tpot(self) -> float:
        """Time per output token after the first (NaN for one-token outputs)."""
        if self.output_len == 1:
            return math.nan
        return (self.finish_time - self.first_token_time) / (self.output_len - 1)

    @property
    def e2e_latency(self) -> float:
        return self.finish_time - self.arrival_time

    @property
    def normalized_latency(self) -> float:
        """End-to-end latency per output token, the PagedAttention paper's measure."""
        return self.e2e_latency / self.output_len

    def meets(self, slo: SLO) -> bool:
        """Whether this request met every latency target of `slo`."""
        return slo.met_by(self.ttft, self.tpot, self.e2e_latency)


# --8<-- [end:metrics]


# --8<-- [start:result]
@dataclass(frozen=True, slots=True)
class StepRecord:
    """One simulated step: which instance, when, and the tokens each request ran."""

    instance: int
    start: float
    duration: float
    num_scheduled_tokens: dict[str, int]


@dataclass
class SimResult:
    """Every request's metrics, and (when recorded) every step."""

    requests: list[RequestMetrics]
    num_steps: int
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def duration(self) -> float:
        """From the first arrival to the last finish."""
        start = min(m.arrival_time for m in self.requests)
        return max(m.finish_time for m in self.requests) - start

    def throughput(self) -> float:
        """Output tokens per second."""
        return sum(m.output_len for m in self.requests) / self.duration

    def request_throughput(self) -> float:
        return len(self.requests) / self.duration

    def goodput(self, slo: SLO) -> float:
        """Requests per second that met every latency target."""
        return sum(m.meets(slo) for m in self.requests) / self.duration

    def attainment(self, slo: SLO) -> float:
        """The fraction of requests that met every latency target."""
        return sum(m.meets(slo) for m in self.requests) / len(self.requests)

    def hit_rate(self) -> float:
        """The share of prompt tokens found in a prefix cache."""
        return sum(m.cached_tokens for m in self.requests) / sum(
            m.prompt_len for m in self.requests
        )

    def percentile(self, metric: str, q: float) -> float:
        """The `q`-th percentile of "ttft", "tpot" or "e2e_latency" (one-token outputs left out).

        >>> r = SimResult([RequestMetrics(str(i), 0.0, 1, 1, i, i) for i in range(101)], 0)
        >>> r.percentile("ttft", 50), r.percentile("e2e_latency", 99)
        (50.0, 99.0)
        """
        values = [getattr(m, metric) for m in self.requests]
        return float(np.percentile([v for v in values if not math.isnan(v)], q))


# --8<-- [end:result]


# --8<-- [start:simulate]
@dataclass
class _Instance:
    index: int
    scheduler: Scheduler
    cost: CostModel
    clock: float = 0.0

    def load(self) -> int:
        return len(self.scheduler.waiting) + len(self.scheduler.running)


def _join(instance: _Instance, request: Request, now: float) -> None:
    """Queue `request` on `instance`; an idle one starts its next step no earlier than now."""
    if not instance.scheduler.has_unfinished_requests():
        instance.clock = max(instance.clock, now)
    instance.scheduler.add_request(request)


class _Run:
    """One simulation in progress: the instances, the events not yet delivered, the metrics."""

    def __init__(
        self,
        workload: Sequence[RequestSpec],
        pools: Sequence[Pool],
        kv_transfer_time: Callable[[int], float],
        record_steps: bool,
        router: Router,
    ) -> None:
        self.metrics = {
            r.request_id: RequestMetrics(r.request_id, r.arrival_time, r.prompt_len, r.output_len)
            for r in workload
        }
        # The answer's token ids, for requests that carry ids: what each step "samples".
        self.answers = {r.request_id: r.token_ids[r.prompt_len :] for r in workload if r.token_ids}
        self.router = router
        # One list per pool; instances are numbered across pools, in pool order.
        self.pools: list[list[_Instance]] = []
        for p in pools:
            start = sum(len(group) for group in self.pools)
            self.pools.append(
                [
                    _Instance(
                        start + i, Scheduler(p.config, block_manager=allocator(p.config)), p.cost
                    )
                    for i in range(p.num_instances)
                ]
            )
        self.disaggregated = len(pools) == 2
        self.arrivals = sorted(workload, key=lambda r: r.arrival_time)[::-1]  # pop(): earliest
        self.handoffs: list[tuple[float, int, Request]] = []  # (ready time, tie-break, request)
        self.tie_break = itertools.count()
        self.kv_transfer_time = kv_transfer_time
        self.record_steps = record_steps
        self.steps: list[StepRecord] = []
        self.num_steps = 0

    def next_event(self) -> Callable[[], None] | None:
        """The earliest of the next arrival, hand-off and step (in that order on a tie);
        None when every request is served."""
        busy = [i for group in self.pools for i in group if i.scheduler.has_unfinished_requests()]
        instance = min(busy, key=lambda i: i.clock) if busy else None
        t_step = instance.clock if instance else math.inf
        t_arrival = self.arrivals[-1].arrival_time if self.arrivals else math.inf
        t_handoff = self.handoffs[0][0] if self.handoffs else math.inf
        if self.arrivals and t_arrival <= min(t_step, t_handoff):
            return self.arrive
        if self.handoffs and t_handoff <= t_step:
            return self.hand_over
        if instance is not None:
            return lambda: self.step(instance)
        return None

    def arrive(self) -> None:
        """Route the next arrival to the first pool; a prefill pool stops it after one token."""
        spec = self.arrivals.pop()
        max_tokens = 1 if self.disaggregated else spec.max_tokens or spec.output_len
        prompt = None if spec.token_ids is None else list(spec.token_ids[: spec.prompt_len])
        request = Request(spec.request_id, spec.prompt_len, max_tokens, token_ids=prompt)
        instances = self.pools[0]
        index = self.router.route([i.load() for i in instances], prompt)
        self.metrics[spec.request_id].instance = instances[index].index
        _join(instances[index], request, spec.arrival_time)

    def hand_over(self) -> None:
        """Route the next prefilled request whose KV cache has arrived to the decode pool."""
        ready, _, request = heapq.heappop(self.handoffs)
        instances = self.pools[1]
        _join(instances[least_loaded([i.load() for i in instances])], request, ready)

    def step(self, instance: _Instance) -> None:
        """Run one scheduler step on `instance`, for as long as its cost model predicts."""
        out = instance.scheduler.schedule()
        if not out.num_scheduled_tokens:
            raise RuntimeError(f"instance {instance.index} has requests but ran nothing")
        duration = instance.cost.step_time(
            out.total_num_scheduled_tokens, out.kv_tokens_read, out.attention_pairs
        )
        if self.record_steps:
            self.steps.append(
                StepRecord(instance.index, instance.clock, duration, out.num_scheduled_tokens)
            )
        instance.clock += duration
        self.num_steps += 1
        for request_id in out.preempted:
            self.metrics[request_id].num_preemptions += 1
        sampled = {
            request_id: self.answers[request_id][r.num_output_tokens]
            for request_id, r in out.scheduled.items()
            if r.token_ids is not None
        }
        for request in instance.scheduler.update_from_output(out, sampled):
            m = self.metrics[request.request_id]
            if (
                request.status is RequestStatus.RUNNING
                and request.num_output_tokens == m.output_len
            ):
                instance.scheduler.finish(request)  # its end-of-sequence token, before max_tokens
            self.record_token(request, instance.clock)

    def record_token(self, request: Request, now: float) -> None:
        """Time a request that got a token at `now`: its first token, its last, or the last
        one of a prefill pool, after which its KV cache goes to the decode pool."""
        m = self.metrics[request.request_id]
        if math.isnan(m.first_token_time):
            m.first_token_time = now
            m.cached_tokens = max(request.num_cached_tokens, 0)
        if request.status is not RequestStatus.FINISHED:
            return
        if request.max_tokens < m.output_len:  # only prefilled
            self.send_kv_cache(m, now)
        else:
            m.finish_time = now

    def send_kv_cache(self, m: RequestMetrics, now: float) -> None:
        """Queue a prefilled request for the decode pool, ready once its KV cache arrives:
        its prompt is computed there and its first token already sampled."""
        handed = Request(
            m.request_id,
            m.prompt_len,
            m.output_len,
            num_computed_tokens=m.prompt_len,
            num_output_tokens=1,
        )
        ready = now + self.kv_transfer_time(m.prompt_len)
        heapq.heappush(self.handoffs, (ready, next(self.tie_break), handed))

    def result(self) -> SimResult:
        return SimResult(list(self.metrics.values()), self.num_steps, self.steps)


def simulate(
    workload: Sequence[RequestSpec],
    pool: Pool,
    *,
    decode: Pool | None = None,
    kv_transfer_time: Callable[[int], float] = lambda prompt_len: 0.0,
    record_steps: bool = False,
    router: Router | None = None,
) -> SimResult:
    """Serve `workload` on `pool` (colocated) or on `pool` then `decode` (disaggregated),
    routing arrivals with `router` (default: `LeastLoaded`)."""
    pools = [pool] if decode is None else [pool, decode]
    run = _Run(workload, pools, kv_transfer_time, record_steps, router or LeastLoaded())
    while (event := run.next_event()) is not None:
        event()
    return run.result()


# --8<-- [end:simulate]
