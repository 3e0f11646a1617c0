/*
 * The serving simulator of the "Scheduler simulator" page, in the browser.
 *
 * The core is pure functions and classes that mirror, one for one and with the same names
 * in camelCase, the Python the page teaches:
 *   - llmserve_ref.engine.scheduler (Request, SchedulerConfig, Scheduler), with the part of
 *     llmserve_ref.engine.block_manager a simulated request uses: it carries no token ids,
 *     so nothing is shared, cached or copied, and a block table is just a count of blocks;
 *   - llmserve_ref.planning.roofline.StepCost.step_time (the step-time model);
 *   - llmserve_ref.planning.simulator (simulate, RequestMetrics, SimResult), for one pool of
 *     instances (colocated serving; the disaggregated hand-off is not ported);
 *   - llmserve_ref.planning.workload (sampleWorkload and its length distributions): the same
 *     distributions, from a seeded generator of its own (not numpy's random numbers).
 * tests/site/test_scheduler_sim_js.py runs this core under Node on workloads made in Python and
 * checks the schedule step by step and the metrics against the Python simulator.
 *
 * In a browser it also mounts the widget in <div id="scheduler-sim">, with the step-time
 * coefficients of the page's model and GPU from scheduler-sim.json, which the docs build
 * writes next to this script (hooks/site_data.py). Elsewhere it does nothing.
 */
// @ts-check
// One function scope: the site's other scripts share the page's global scope.
(() => {
  "use strict";

  /**
   * SchedulerConfig's fields (camelCase), checked, with the watermark in blocks.
   * @typedef {{tokenBudget: number, maxNumSeqs: number, blockSize: number, numBlocks: number,
   *   batching: string, priority: string, watermark: number, maxSkips: number,
   *   watermarkBlocks: number}} SchedulerConfig
   */
  /**
   * One request of a workload, as planning.workload.RequestSpec.
   * @typedef {{requestId: string, arrivalTime: number, promptLen: number,
   *   outputLen: number}} RequestSpec
   */
  /**
   * StepCost's public numbers (hooks/site_data.py's step_cost_as_dict).
   * @typedef {{weightBytes: number, kvBytesPerToken: number, flopsPerToken: number,
   *   flopsPerPair: number, peakFlops: number, memoryBandwidth: number, mfu: number,
   *   mbu: number}} StepCostData
   */
  /** @typedef {(numTokens: number, kvTokensRead: number, attentionPairs: number) => number}
   *   StepTime seconds one step takes */
  /**
   * One step of one instance, as the simulator records it.
   * @typedef {{instance: number, start: number, duration: number,
   *   numScheduledTokens: Map<string, number>, preempted: string[]}} Step
   */
  /** @typedef {{ttft: number | null, tpot: number | null, e2e: number | null}} SloTargets */
  /** @typedef {() => number} Random uniform in [0, 1) */
  /** @typedef {(random: Random) => number} Lengths a length distribution */

  /**
   * @param {boolean} condition
   * @param {string} message
   * @returns {asserts condition}
   */
  function check(condition, message) {
    if (!condition) throw new Error(message);
  }

  /* ---- the block manager, as far as requests without token ids use it ---- */

  /**
   * @param {number} numTokens
   * @param {number} blockSize
   * @returns {number}
   */
  function blocksFor(numTokens, blockSize) {
    return Math.ceil(numTokens / blockSize);
  }

  /* Free blocks and, per request, how many it holds: with no prefix cache and no sharing,
     BlockManager's reference counts are all 1 and its block ids never matter here. */
  class BlockManager {
    /**
     * @param {number} numBlocks
     * @param {number} blockSize
     */
    constructor(numBlocks, blockSize) {
      this.numBlocks = numBlocks;
      this.blockSize = blockSize;
      this.numFreeBlocks = numBlocks;
      /** @type {Map<string, number>} */
      this.tables = new Map(); // request id -> blocks held
    }

    /**
     * @param {number} numTokens
     * @param {number} [capacity]
     * @returns {number}
     */
    blocksNeeded(numTokens, capacity = 0) {
      return blocksFor(Math.max(numTokens, capacity), this.blockSize);
    }

    /**
     * Returns the tokens found in the prefix cache: none, without token ids.
     * @param {string} seqId
     * @param {number} numTokens
     * @param {number} [capacity]
     * @returns {number}
     */
    allocate(seqId, numTokens, capacity = 0) {
      const needed = this.blocksNeeded(numTokens, capacity);
      check(!this.tables.has(seqId),
        `sequence '${seqId}' already has a block table; free it first`);
      check(needed <= this.numFreeBlocks,
        `sequence '${seqId}' needs ${needed} free blocks, ${this.numFreeBlocks} are free`);
      this.tables.set(seqId, needed);
      this.numFreeBlocks -= needed;
      return 0;
    }

    /**
     * Room for positions up to numTokens - 1; false, changing nothing, if blocks are short.
     * @param {string} seqId
     * @param {number} numComputedTokens
     * @param {number} numTokens
     * @returns {boolean}
     */
    appendSlots(seqId, numComputedTokens, numTokens) {
      const held = this.held(seqId);
      const added = Math.max(0, blocksFor(numTokens, this.blockSize) - held);
      if (added > this.numFreeBlocks) return false;
      this.tables.set(seqId, held + added);
      this.numFreeBlocks -= added;
      return true;
    }

    /** @param {string} seqId */
    free(seqId) {
      this.numFreeBlocks += this.held(seqId);
      this.tables.delete(seqId);
    }

    /**
     * The blocks a request holds (it must hold a table: allocate() gave it one).
     * @param {string} seqId
     * @returns {number}
     */
    held(seqId) {
      return /** @type {number} */ (this.tables.get(seqId));
    }
  }

  /* ---- the scheduler ---- */

  const WAITING = "waiting";
  const RUNNING = "running";
  const FINISHED = "finished";

  /* One request, counted in tokens (n = 1: the simulator never forks). */
  class Request {
    /**
     * @param {string} requestId
     * @param {number} promptLen
     * @param {number} maxTokens
     */
    constructor(requestId, promptLen, maxTokens) {
      this.requestId = requestId;
      this.promptLen = promptLen;
      this.maxTokens = maxTokens;
      this.numComputedTokens = 0;
      this.numOutputTokens = 0;
      this.status = WAITING;
      this.numPreemptions = 0;
      this.numSkips = 0; // times a later request was admitted ahead of it
      this.reserved = false; // a static batch's member: blocks held for its whole length
    }

    get numTokens() {
      return this.promptLen + this.numOutputTokens;
    }

    get isDecoding() {
      return this.numOutputTokens > 0 && this.numComputedTokens === this.numTokens - 1;
    }
  }

  const CONFIG_DEFAULTS = {
    tokenBudget: 2048, maxNumSeqs: 256, blockSize: 16, numBlocks: 4096,
    batching: "continuous", priority: "decode", watermark: 0.01, maxSkips: 0,
  };

  /**
   * SchedulerConfig: the defaults and the checks of the Python dataclass.
   * @param {Partial<SchedulerConfig>} [options]
   * @returns {SchedulerConfig}
   */
  function schedulerConfig(options = {}) {
    const c = { ...CONFIG_DEFAULTS, watermarkBlocks: 0, ...options };
    /** @type {("tokenBudget" | "maxNumSeqs" | "blockSize" | "numBlocks")[]} */
    const counts = ["tokenBudget", "maxNumSeqs", "blockSize", "numBlocks"];
    for (const name of counts) {
      check(Number.isInteger(c[name]) && c[name] >= 1,
        `${name} must be at least 1, got ${c[name]}`);
    }
    check(c.tokenBudget >= c.maxNumSeqs,
      `token_budget ${c.tokenBudget} < max_num_seqs ${c.maxNumSeqs}: a step could not give ` +
      "every running request its decode token; raise token_budget");
    check(["continuous", "static"].includes(c.batching),
      `batching is 'continuous' or 'static', got '${c.batching}'`);
    check(["decode", "prefill"].includes(c.priority),
      `priority is 'decode' or 'prefill', got '${c.priority}'`);
    check(c.watermark >= 0 && c.watermark < 1,
      `watermark is a fraction in [0, 1), got ${c.watermark}`);
    check(Number.isInteger(c.maxSkips) && c.maxSkips >= 0,
      `max_skips must be 0 or more, got ${c.maxSkips}`);
    c.watermarkBlocks = Math.floor(c.watermark * c.numBlocks);
    return c;
  }

  /**
   * (query, key) pairs `numTokens` new tokens score after `numCached` cached ones, causally.
   * @param {number} numTokens
   * @param {number} numCached
   * @returns {number}
   */
  function pairs(numTokens, numCached) {
    return numTokens * numCached + (numTokens * (numTokens + 1)) / 2;
  }

  /* What one step runs, with the two sums the step-time model takes. */
  class SchedulerOutput {
    constructor() {
      /** @type {Map<string, number>} */
      this.numScheduledTokens = new Map(); // request id -> tokens, in scheduling order
      /** @type {Map<string, Request>} */
      this.scheduled = new Map(); // request id -> Request
      /** @type {string[]} */
      this.preempted = [];
      this.totalNumScheduledTokens = 0;
      this.kvTokensRead = 0;
      this.attentionPairs = 0;
    }

    /**
     * @param {Request} request
     * @param {number} numTokens
     */
    add(request, numTokens) {
      this.scheduled.set(request.requestId, request);
      this.numScheduledTokens.set(request.requestId, numTokens);
      this.totalNumScheduledTokens += numTokens;
      this.kvTokensRead += request.numComputedTokens;
      this.attentionPairs += pairs(numTokens, request.numComputedTokens);
    }

    /** @param {Request} request */
    remove(request) {
      const numTokens = this.numScheduledTokens.get(request.requestId) || 0;
      if (!numTokens) return;
      this.numScheduledTokens.delete(request.requestId);
      this.scheduled.delete(request.requestId);
      this.totalNumScheduledTokens -= numTokens;
      this.kvTokensRead -= request.numComputedTokens;
      this.attentionPairs -= pairs(numTokens, request.numComputedTokens);
    }
  }

  class Scheduler {
    /** @param {SchedulerConfig} config */
    constructor(config) {
      this.config = config;
      /** @type {Request[]} */
      this.waiting = []; // a deque: index 0 is its head
      /** @type {Request[]} */
      this.running = []; // in admission order
      this.blockManager = new BlockManager(config.numBlocks, config.blockSize);
      this.numPreemptions = 0;
    }

    /** @param {Request} request */
    addRequest(request) {
      check(request.promptLen >= 1 && request.maxTokens >= 1,
        `request '${request.requestId}': prompt_len and max_tokens must be at least 1, ` +
        `got ${request.promptLen} and ${request.maxTokens}`);
      const needed = blocksFor(request.promptLen + request.maxTokens, this.config.blockSize);
      check(needed <= this.config.numBlocks,
        `request '${request.requestId}' needs ${needed} KV blocks for ${request.promptLen} ` +
        `prompt + ${request.maxTokens} max_tokens at block_size ${this.config.blockSize}, but ` +
        `the whole cache has ${this.config.numBlocks}; shorten the prompt or max_tokens, or ` +
        "give the cache more blocks");
      request.status = WAITING;
      this.waiting.push(request);
    }

    /**
     * This step's tokens: decodes, prompt chunks and admissions, in priority order.
     * @returns {SchedulerOutput}
     */
    schedule() {
      const out = new SchedulerOutput();
      if (this.config.priority === "decode") {
        this.scheduleDecodes(out);
        this.schedulePrefills(out);
        this.admit(out);
      } else {
        this.schedulePrefills(out);
        this.admit(out);
        this.scheduleDecodes(out);
      }
      return out;
    }

    /**
     * @param {SchedulerOutput} out
     * @returns {number}
     */
    budgetLeft(out) {
      return this.config.tokenBudget - out.totalNumScheduledTokens;
    }

    /** @param {SchedulerOutput} out */
    scheduleDecodes(out) {
      for (const request of [...this.running]) { // oldest first; preemption shrinks the list
        if (request.status !== RUNNING || !request.isDecoding) continue;
        if (this.budgetLeft(out) === 0) return;
        if (this.grow(request, out)) out.add(request, 1);
      }
    }

    /** @param {SchedulerOutput} out */
    schedulePrefills(out) {
      for (const request of this.running) {
        if (request.isDecoding) continue;
        const chunk = Math.min(request.numTokens - request.numComputedTokens, this.budgetLeft(out));
        if (chunk === 0) return;
        out.add(request, chunk);
      }
    }

    /**
     * Move waiting requests to running while a seat, the budget and their blocks allow.
     * @param {SchedulerOutput} out
     */
    admit(out) {
      const isStatic = this.config.batching === "static";
      if (isStatic && this.running.length) return; // a static batch runs until its last finishes
      if (out.preempted.length) return; // memory ran out this step: an admission would be next
      const blocks = this.blockManager;
      const skipped = [];
      while (this.waiting.length) {
        if (!isStatic && this.budgetLeft(out) === 0) break;
        const request = this.waiting[0];
        if (this.running.length + 1 > this.config.maxNumSeqs) break;
        const capacity = this.capacity(request);
        const needed = blocks.blocksNeeded(request.numTokens, capacity);
        const headroom = this.running.length && !isStatic ? this.config.watermarkBlocks : 0;
        if (needed + headroom > blocks.numFreeBlocks) {
          if (request.numSkips >= this.config.maxSkips) break; // head-of-line: nobody passes it
          request.numSkips += 1;
          skipped.push(/** @type {Request} */ (this.waiting.shift()));
          continue;
        }
        this.waiting.shift();
        const cached = blocks.allocate(request.requestId, request.numTokens, capacity);
        request.numComputedTokens = Math.max(request.numComputedTokens, cached);
        request.reserved = capacity > request.numTokens;
        request.status = RUNNING;
        this.running.push(request);
        const chunk = Math.min(request.numTokens - request.numComputedTokens, this.budgetLeft(out));
        if (chunk) out.add(request, chunk);
      }
      this.waiting.unshift(...skipped);
    }

    /* Tokens to hold blocks for at admission: a static batch's member its whole length, since
       it never grows; any other request (one resumed after a preemption too) what it has. */
    /**
     * @param {Request} request
     * @returns {number}
     */
    capacity(request) {
      if (this.config.batching === "static") return request.promptLen + request.maxTokens;
      return request.numTokens;
    }

    /* Room for a decode's next token, preempting the newest unreserved request if none is free
       (possibly `request` itself). Returns whether `request` still runs. */
    /**
     * @param {Request} request
     * @param {SchedulerOutput} out
     * @returns {boolean}
     */
    grow(request, out) {
      const blocks = this.blockManager;
      while (!blocks.appendSlots(request.requestId, request.numComputedTokens, request.numTokens)) {
        const victim = [...this.running].reverse().find((r) => !r.reserved);
        check(victim !== undefined,
          `no running request can be preempted for '${request.requestId}'`);
        this.preempt(victim, out);
        if (victim === request) return false;
      }
      return true;
    }

    /**
     * Recompute preemption: drop its cache, keep its outputs, queue it first.
     * @param {Request} request
     * @param {SchedulerOutput} out
     */
    preempt(request, out) {
      out.remove(request); // it may already hold a chunk of this step
      this.running.splice(this.running.indexOf(request), 1);
      this.blockManager.free(request.requestId);
      request.numComputedTokens = 0;
      request.status = WAITING;
      request.numPreemptions += 1;
      this.numPreemptions += 1;
      this.waiting.unshift(request);
      out.preempted.push(request.requestId);
    }

    /**
     * Advance the scheduled requests after the forward pass; return those that sampled.
     * @param {SchedulerOutput} out
     * @returns {Request[]}
     */
    updateFromOutput(out) {
      const sampled = [];
      let finished = false;
      for (const [requestId, numTokens] of out.numScheduledTokens) {
        const request = /** @type {Request} */ (out.scheduled.get(requestId));
        request.numComputedTokens += numTokens;
        if (request.numComputedTokens === request.numTokens) {
          request.numOutputTokens += 1;
          sampled.push(request);
          if (request.numOutputTokens === request.maxTokens) {
            request.status = FINISHED;
            this.blockManager.free(requestId);
            finished = true;
          }
        }
      }
      if (finished) this.running = this.running.filter((r) => r.status === RUNNING);
      return sampled;
    }

    hasUnfinishedRequests() {
      return this.waiting.length > 0 || this.running.length > 0;
    }
  }

  /* ---- the step-time model: roofline.StepCost ---- */

  /* `cost` holds StepCost's public numbers: weightBytes, kvBytesPerToken, flopsPerToken,
     flopsPerPair, peakFlops, memoryBandwidth, mfu, mbu (hooks/site_data.py writes them). */
  /**
   * @param {StepCostData} cost
   * @returns {StepTime}
   */
  function stepCost(cost) {
    const flops = cost.peakFlops * cost.mfu;
    const bandwidth = cost.memoryBandwidth * cost.mbu;
    // Seconds per unit of each quantity, computed as the Python computes them, so the two
    // agree to the last bit.
    const sPerToken = cost.flopsPerToken / flops;
    const sPerPair = cost.flopsPerPair / flops;
    const sWeights = cost.weightBytes / bandwidth;
    const sPerKvToken = cost.kvBytesPerToken / bandwidth;
    return (numTokens, kvTokensRead, attentionPairs) => {
      const compute = sPerToken * numTokens + sPerPair * attentionPairs;
      const memory = sWeights + sPerKvToken * (kvTokensRead + numTokens);
      return Math.max(compute, memory);
    };
  }

  /* ---- the simulator ---- */

  /* When one request arrived, got its first token and finished (simulated seconds). */
  class RequestMetrics {
    /** @param {RequestSpec} spec */
    constructor(spec) {
      this.requestId = spec.requestId;
      this.arrivalTime = spec.arrivalTime;
      this.promptLen = spec.promptLen;
      this.outputLen = spec.outputLen;
      this.firstTokenTime = NaN;
      this.finishTime = NaN;
      this.numPreemptions = 0;
    }

    get ttft() {
      return this.firstTokenTime - this.arrivalTime;
    }

    /* Time per output token after the first (NaN for one-token outputs). */
    get tpot() {
      if (this.outputLen === 1) return NaN;
      return (this.finishTime - this.firstTokenTime) / (this.outputLen - 1);
    }

    get e2eLatency() {
      return this.finishTime - this.arrivalTime;
    }

    /**
     * slo: { ttft, tpot, e2e } in seconds, null for no target; as SLO.met_by.
     * @param {SloTargets} slo
     * @returns {boolean}
     */
    meets(slo) {
      return (slo.ttft == null || this.ttft <= slo.ttft) &&
        (slo.tpot == null || Number.isNaN(this.tpot) || this.tpot <= slo.tpot) &&
        (slo.e2e == null || this.e2eLatency <= slo.e2e);
    }
  }

  /**
   * numpy.percentile's default (linear) method, with numpy's own interpolation formula.
   * @param {number[]} values
   * @param {number} q
   * @returns {number}
   */
  function percentileOf(values, q) {
    const sorted = [...values].sort((a, b) => a - b);
    const position = (q / 100) * (sorted.length - 1);
    const low = Math.floor(position);
    const high = Math.min(low + 1, sorted.length - 1);
    const t = position - low;
    const a = sorted[low];
    const b = sorted[high];
    const difference = b - a;
    // numpy interpolates from the nearer end, so that t = 1 gives b exactly.
    return t >= 0.5 ? b - difference * (1 - t) : a + difference * t;
  }

  class SimResult {
    /**
     * @param {RequestMetrics[]} requests
     * @param {number} numSteps
     * @param {Step[]} steps
     */
    constructor(requests, numSteps, steps) {
      this.requests = requests;
      this.numSteps = numSteps;
      this.steps = steps;
    }

    /* The first arrival. */
    get start() {
      return this.requests.reduce((t, m) => Math.min(t, m.arrivalTime), Infinity);
    }

    /* From the first arrival to the last finish. */
    get duration() {
      return this.requests.reduce((t, m) => Math.max(t, m.finishTime), -Infinity) - this.start;
    }

    /* Output tokens per second. */
    throughput() {
      return this.requests.reduce((sum, m) => sum + m.outputLen, 0) / this.duration;
    }

    requestThroughput() {
      return this.requests.length / this.duration;
    }

    /**
     * Requests per second that met every latency target.
     * @param {SloTargets} slo
     * @returns {number}
     */
    goodput(slo) {
      return this.requests.filter((m) => m.meets(slo)).length / this.duration;
    }

    /**
     * @param {SloTargets} slo
     * @returns {number}
     */
    attainment(slo) {
      return this.requests.filter((m) => m.meets(slo)).length / this.requests.length;
    }

    /**
     * The q-th percentile of "ttft", "tpot" or "e2eLatency" (one-token outputs left out).
     * @param {"ttft" | "tpot" | "e2eLatency"} metric
     * @param {number} q
     * @returns {number}
     */
    percentile(metric, q) {
      return percentileOf(this.requests.map((m) => m[metric]).filter((v) => !Number.isNaN(v)), q);
    }
  }

  /* Serve `workload` (objects with requestId, arrivalTime, promptLen, outputLen) on
     `numInstances` instances of `config`, each step lasting `stepTime(numTokens, kvTokensRead,
     attentionPairs)` seconds. A router sends each arrival to the instance with the fewest
     unfinished requests; time advances by always stepping the instance whose next step starts
     first, after any arrival due by then. */
  /**
   * @param {RequestSpec[]} workload
   * @param {SchedulerConfig} config
   * @param {StepTime} stepTime
   * @param {{numInstances?: number, recordSteps?: boolean}} [options]
   * @returns {SimResult}
   */
  function simulate(workload, config, stepTime, { numInstances = 1, recordSteps = false } = {}) {
    const metrics = new Map(workload.map((r) => [r.requestId, new RequestMetrics(r)]));
    const instances = Array.from({ length: numInstances }, (_, index) => (
      { index, scheduler: new Scheduler(config), clock: 0 }
    ));
    /** @typedef {(typeof instances)[number]} Instance */
    /** @type {(i: Instance) => number} */
    const load = (i) => i.scheduler.waiting.length + i.scheduler.running.length;
    const arrivals = [...workload].sort((a, b) => a.arrivalTime - b.arrivalTime); // stable
    let next = 0; // the next arrival
    /** @type {Step[]} */
    const steps = [];
    let numSteps = 0;

    /**
     * The metrics of a request of the workload.
     * @param {string} requestId
     * @returns {RequestMetrics}
     */
    const metric = (requestId) => /** @type {RequestMetrics} */ (metrics.get(requestId));

    // Join the least-loaded instance; an idle one starts its next step no earlier than now.
    function arrive() {
      const spec = arrivals[next++];
      const request = new Request(spec.requestId, spec.promptLen, spec.outputLen);
      const instance = instances.reduce((best, i) => (load(i) < load(best) ? i : best));
      if (!instance.scheduler.hasUnfinishedRequests()) {
        instance.clock = Math.max(instance.clock, spec.arrivalTime);
      }
      instance.scheduler.addRequest(request);
    }

    /**
     * One scheduler step on `instance`, for as long as the cost model predicts.
     * @param {Instance} instance
     */
    function step(instance) {
      const out = instance.scheduler.schedule();
      check(out.numScheduledTokens.size > 0,
        `instance ${instance.index} has requests but ran nothing`);
      const duration = stepTime(out.totalNumScheduledTokens, out.kvTokensRead, out.attentionPairs);
      if (recordSteps) {
        steps.push({
          instance: instance.index, start: instance.clock, duration,
          numScheduledTokens: out.numScheduledTokens, // a Map: ids like "7" keep their order
          preempted: out.preempted,
        });
      }
      instance.clock += duration;
      numSteps += 1;
      for (const requestId of out.preempted) metric(requestId).numPreemptions += 1;
      for (const request of instance.scheduler.updateFromOutput(out)) {
        const m = metric(request.requestId);
        if (Number.isNaN(m.firstTokenTime)) m.firstTokenTime = instance.clock;
        if (request.status === FINISHED) m.finishTime = instance.clock;
      }
    }

    for (;;) {
      // The earliest of the next arrival and the next step (the arrival first on a tie).
      const busy = instances.filter((i) => i.scheduler.hasUnfinishedRequests());
      const instance = busy.length ? busy.reduce((a, b) => (b.clock < a.clock ? b : a)) : null;
      const tStep = instance ? instance.clock : Infinity;
      if (next < arrivals.length && arrivals[next].arrivalTime <= tStep) arrive();
      else if (instance) step(instance);
      else break;
    }
    return new SimResult([...metrics.values()], numSteps, steps);
  }

  /* ---- workloads: planning/workload.py's distributions, from a seeded generator ---- */

  /**
   * A small seeded generator (mulberry32): uniform in [0, 1), the same stream for a seed.
   * @param {number} seed
   * @returns {Random}
   */
  function rng(seed) {
    let a = seed >>> 0;
    return () => {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  /**
   * A standard normal draw (Box-Muller; 1 - u keeps the logarithm finite).
   * @param {Random} random
   * @returns {number}
   */
  function normal(random) {
    const u = 1 - random();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
  }

  /* A gamma draw of this shape and scale (Marsaglia and Tsang, 2000; a shape below 1 is
     drawn at shape + 1 and scaled by u^(1/shape)). */
  /**
   * @param {Random} random
   * @param {number} shape
   * @param {number} scale
   * @returns {number}
   */
  function gamma(random, shape, scale) {
    if (shape < 1) return gamma(random, shape + 1, scale) * (1 - random()) ** (1 / shape);
    const d = shape - 1 / 3;
    const c = 1 / Math.sqrt(9 * d);
    for (;;) {
      const x = normal(random);
      const v = (1 + c * x) ** 3;
      if (v <= 0) continue;
      const u = 1 - random();
      if (Math.log(u) < 0.5 * x * x + d - d * v + d * Math.log(v)) return d * v * scale;
    }
  }

  /**
   * Length distributions, as workload.py's Fixed, Uniform and LogNormal.
   * @param {number} length
   * @returns {Lengths}
   */
  function fixed(length) {
    return () => length;
  }

  /**
   * Lengths uniform in [low, high], both included.
   * @param {number} low
   * @param {number} high
   * @returns {Lengths}
   */
  function uniform(low, high) {
    return (random) => low + Math.floor(random() * (high - low + 1));
  }

  /**
   * exp of a normal with this median and sigma, rounded, clipped to [low, high].
   * @param {number} median
   * @param {number} sigma
   * @param {number} [low]
   * @param {number} [high]
   * @returns {Lengths}
   */
  function logNormal(median, sigma, low = 1, high = 32768) {
    return (random) => {
      const draw = Math.exp(Math.log(median) + sigma * normal(random));
      return Math.min(high, Math.max(low, Math.round(draw)));
    };
  }

  /* `numRequests` requests with gamma gaps of mean 1 / rate (shape `burstiness`; rate
     Infinity: all at time 0), the same ones for the same arguments and seed. */
  /**
   * @param {number} numRequests
   * @param {number} rate
   * @param {Lengths} promptLen
   * @param {Lengths} outputLen
   * @param {{burstiness?: number, seed?: number}} [options]
   * @returns {RequestSpec[]}
   */
  function sampleWorkload(numRequests, rate, promptLen, outputLen,
    { burstiness = 1, seed = 0 } = {}) {
    check(rate > 0 && burstiness > 0,
      `rate and burstiness must be positive, got ${rate} and ${burstiness}`);
    const random = rng(seed);
    const times = [];
    let t = 0;
    for (let i = 0; i < numRequests; i++) {
      if (Number.isFinite(rate)) t += gamma(random, burstiness, 1 / (rate * burstiness));
      times.push(t);
    }
    // Like numpy's sampler: all the arrival times, then all the prompts, then all the outputs.
    const prompts = times.map(() => promptLen(random));
    const outputs = times.map(() => outputLen(random));
    check(prompts.every((n) => n >= 1) && outputs.every((n) => n >= 1),
      "every prompt and output must be at least one token; raise `low`");
    return times.map((arrivalTime, i) => (
      { requestId: String(i), arrivalTime, promptLen: prompts[i], outputLen: outputs[i] }
    ));
  }

  const core = {
    BlockManager, Request, Scheduler, schedulerConfig, pairs, stepCost, simulate, SimResult,
    RequestMetrics, percentileOf, rng, gamma, normal, fixed, uniform, logNormal, sampleWorkload,
    runSettings,
  };

  if (typeof module !== "undefined") module.exports = core;

  /* ---- the widget: runs only in a browser, only where the page has one ---- */

  const SVG = "http://www.w3.org/2000/svg";
  const TIMELINE_WIDTH = 720; // the timeline's viewBox
  const TIMELINE_HEIGHT = 160;
  const NUM_REQUESTS = 200;
  const PROMPT_HIGH = 4096; // length caps, so that every request fits the smallest cache offered
  const OUTPUT_HIGH = 1024;
  /** @type {SloTargets} */
  const SLO_TARGETS = { ttft: 0.5, tpot: 0.05, e2e: null }; // the page's SLO

  /**
   * The widget's settings: the workload's and the scheduler's.
   * @typedef {{rate: number, promptMedian: number, promptSigma: number, outputMedian: number,
   *   outputSigma: number, tokenBudget: number, maxNumSeqs: number, numBlocks: number,
   *   seed: number}} Settings
   */
  /**
   * scheduler-sim.json (hooks/site_data.py): what the page simulates.
   * @typedef {{model: string, gpu: string, cost: StepCostData, blockSize: number,
   *   gpuBlocks: number}} SimData
   */

  /**
   * The page's settings, read from its sliders (ids sim-rate, sim-budget, ...).
   * @param {HTMLElement} root
   * @returns {Settings}
   */
  function readSettings(root) {
    /** @type {(id: string) => number} */
    const value = (id) => Number(
      /** @type {HTMLInputElement} */ (root.querySelector(`#sim-${id}`)).value);
    return {
      rate: value("rate"), promptMedian: value("prompt"), promptSigma: value("prompt-sigma"),
      outputMedian: value("output"), outputSigma: value("output-sigma"),
      tokenBudget: value("budget"), maxNumSeqs: value("seqs"), numBlocks: value("blocks"),
      seed: value("seed"),
    };
  }

  /* The widget's whole computation, without the page: a workload of NUM_REQUESTS requests
     from the settings, served on one instance (the browser test runs it under Node too). */
  /**
   * @param {Settings} settings
   * @param {SimData} data
   * @returns {SimResult}
   */
  function runSettings(settings, data) {
    const workload = sampleWorkload(NUM_REQUESTS, settings.rate,
      logNormal(settings.promptMedian, settings.promptSigma, 1, PROMPT_HIGH),
      logNormal(settings.outputMedian, settings.outputSigma, 1, OUTPUT_HIGH),
      { seed: settings.seed });
    const config = schedulerConfig({
      tokenBudget: settings.tokenBudget, maxNumSeqs: settings.maxNumSeqs,
      blockSize: data.blockSize, numBlocks: settings.numBlocks,
    });
    return simulate(workload, config, stepCost(data.cost), { recordSteps: true });
  }

  /** @type {(x: number, digits: number) => string} */
  const fmt = (x, digits) => x.toLocaleString("en", {
    minimumFractionDigits: digits, maximumFractionDigits: digits,
  });
  /** @type {(seconds: number) => string} Latencies in ms below a second, in seconds above. */
  const latency = (seconds) => (
    seconds < 1 ? `${fmt(seconds * 1e3, 1)} ms` : `${fmt(seconds, 2)} s`);

  /**
   * What the widget shows for one setting: each output's text by id (sim-out-<id>), the
   * timeline's paths and its caption; or the error that stopped the simulation.
   * @typedef {{outputs: Record<string, string>, paths: [string, string][], caption: string}
   *   | {error: string}} View
   */

  /* Steps as bars (tokens against the budget) and a line (requests in the step against
     max_num_seqs), with a tick above each step that preempted: one <path> each, as
     [d, class] in a 720 x 160 viewBox. */
  /**
   * @param {SimResult} result
   * @param {Settings} settings
   * @returns {[string, string][]}
   */
  function timelinePaths(result, settings) {
    const width = TIMELINE_WIDTH;
    const height = TIMELINE_HEIGHT;
    const top = 12;
    /** @type {(t: number) => number} */
    const x = (t) => (t / result.duration) * width;
    /** @type {(fraction: number) => number} */
    const y = (fraction) => top + (1 - fraction) * (height - top);
    let bars = "";
    let line = "";
    let ticks = "";
    for (const s of result.steps) {
      const x0 = x(s.start - result.start);
      const w = Math.max(x(s.duration), 0.3);
      const tokens = [...s.numScheduledTokens.values()].reduce((a, b) => a + b, 0);
      bars += `M${x0.toFixed(2)} ${height}V${y(tokens / settings.tokenBudget).toFixed(2)}` +
        `h${w.toFixed(2)}V${height}Z`;
      const batch = y(s.numScheduledTokens.size / settings.maxNumSeqs).toFixed(2);
      line += `${line ? "L" : "M"}${x0.toFixed(2)} ${batch}h${w.toFixed(2)}`;
      if (s.preempted.length) ticks += `M${x0.toFixed(2)} 0v${top - 2}`;
    }
    return [[bars, "sim-tokens"], [line, "sim-batch"], [ticks, "sim-preempt"]];
  }

  /**
   * The whole computation behind one view of the widget, as text: no page needed, so that a
   * Worker runs it (the page stays responsive while it simulates).
   * @param {Settings} settings
   * @param {SimData} data
   * @returns {View}
   */
  function widgetView(settings, data) {
    try {
      const result = runSettings(settings, data);
      /** @type {Record<string, string>} */
      const outputs = {};
      for (const metric of /** @type {const} */ (["ttft", "tpot"])) {
        for (const q of [50, 90, 99]) {
          outputs[`${metric}-p${q}`] = latency(result.percentile(metric, q));
        }
      }
      const preemptions = result.requests.reduce((n, m) => n + m.numPreemptions, 0);
      outputs.throughput = `${fmt(result.throughput(), 0)} output tokens/s`;
      outputs.goodput = `${fmt(result.goodput(SLO_TARGETS), 2)} requests/s ` +
        `(${fmt(100 * result.attainment(SLO_TARGETS), 0)}% within the SLO)`;
      outputs.steps =
        `${result.numSteps.toLocaleString("en")} steps in ${fmt(result.duration, 1)} s`;
      outputs.preemptions = preemptions.toLocaleString("en");
      const caption = `Timeline: ${result.numSteps.toLocaleString("en")} ` +
        `steps over ${fmt(result.duration, 1)} s of simulated time, ` +
        `${preemptions.toLocaleString("en")} preemptions.`;
      return { outputs, paths: timelinePaths(result, settings), caption };
    } catch (error) {
      return { error: /** @type {Error} */ (error).message };
    }
  }

  /**
   * Computes views in a Worker that runs this same script, one at a time: a request made
   * while one runs waits, and only the newest waiting one runs next (a moving slider asks
   * for many). Without Workers, or if the Worker does not load, it computes on the page.
   * @param {string | null} scriptUrl this script's URL
   * @param {(view: View) => void} show
   * @returns {(settings: Settings, data: SimData) => void}
   */
  function viewComputer(scriptUrl, show) {
    /** @type {Worker | null} */
    let worker = null;
    try {
      if (scriptUrl && typeof Worker === "function") worker = new Worker(scriptUrl);
    } catch (error) {
      worker = null; // e.g. a page opened from a file: compute on the page
    }
    /** @typedef {[Settings, SimData]} Asked */
    /** @type {Asked | null} */
    let running = null;
    /** @type {Asked | null} */
    let waiting = null; // the newest request made while one ran
    /** @param {Asked} asked */
    const run = (asked) => {
      running = asked;
      if (worker) worker.postMessage({ settings: asked[0], data: asked[1] });
      else done(widgetView(...asked));
    };
    /** @param {View} view */
    const done = (view) => {
      running = null;
      show(view);
      const next = waiting;
      waiting = null;
      if (next) run(next);
    };
    if (worker) {
      worker.onmessage = (event) => done(event.data);
      worker.onerror = (event) => { // it did not load: compute on the page from now on
        event.preventDefault();
        worker = null;
        if (running) run(running);
      };
    }
    return (settings, data) => {
      if (running) waiting = [settings, data];
      else run([settings, data]);
    };
  }

  // In the Worker that viewComputer starts: a view for each {settings, data} the page posts.
  if (typeof document === "undefined" && "importScripts" in globalThis) {
    self.onmessage = (event) => {
      self.postMessage(widgetView(event.data.settings, event.data.data));
    };
  }

  /**
   * @param {HTMLElement} root
   * @param {string} dataUrl
   * @param {string | null} scriptUrl this script's URL, which a Worker runs
   */
  function mountSimulator(root, dataUrl, scriptUrl) {
    if (root.dataset.mounted) return;
    root.dataset.mounted = "yes";
    /** @type {(id: string) => HTMLElement} the widget's element of id sim-<id> */
    const $ = (id) => /** @type {HTMLElement} */ (root.querySelector(`#sim-${id}`));
    /** @type {SimData} the page's data, once loaded (nothing runs before) */
    let data;
    let pending = false;

    /** @param {View} view */
    function show(view) {
      if ("error" in view) {
        root.querySelectorAll("output[id^=sim-out]").forEach((o) => { o.textContent = "-"; });
        $("error").textContent = view.error;
        return;
      }
      for (const [id, text] of Object.entries(view.outputs)) $(`out-${id}`).textContent = text;
      const svg = $("timeline");
      svg.setAttribute("viewBox", `0 0 ${TIMELINE_WIDTH} ${TIMELINE_HEIGHT}`);
      svg.replaceChildren();
      for (const [d, cls] of view.paths) {
        const path = document.createElementNS(SVG, "path");
        path.setAttribute("d", d);
        path.setAttribute("class", cls);
        svg.append(path);
      }
      $("timeline-caption").textContent = view.caption;
      $("error").textContent = "";
    }
    const compute = viewComputer(scriptUrl, show);

    function update() {
      pending = false;
      root.querySelectorAll("input[type=range]").forEach((input) => {
        /** @type {HTMLOutputElement} */ (root.querySelector(`output[for="${input.id}"]`))
          .textContent =
          Number(/** @type {HTMLInputElement} */ (input).value).toLocaleString("en");
      });
      compute(readSettings(root), data);
    }

    // A slider fires many input events while it moves: ask for a view once per frame at most.
    const schedule = () => {
      if (!pending) {
        pending = true;
        requestAnimationFrame(update);
      }
    };

    fetch(dataUrl)
      .then((response) => {
        if (!response.ok) throw new Error(`${dataUrl}: HTTP ${response.status}`);
        return response.json();
      })
      .then((/** @type {SimData} */ loaded) => {
        data = loaded;
        $("hardware").textContent = `${data.model} on one ${data.gpu} (whose memory holds ` +
          `${data.gpuBlocks.toLocaleString("en")} blocks of ${data.blockSize} tokens), at ` +
          `${fmt(100 * data.cost.mfu, 0)}% of its peak FLOP/s and ` +
          `${fmt(100 * data.cost.mbu, 0)}% of its bandwidth`;
        root.addEventListener("input", schedule);
        update();
      })
      .catch((error) => {
        $("error").textContent = `The simulator's data did not load (${error.message}).`;
      });
  }

  if (typeof document !== "undefined") {
    const script = /** @type {HTMLScriptElement | null} */ (document.currentScript);
    const dataUrl = new URL("scheduler-sim.json", script ? script.src : document.baseURI).href;
    const start = () => {
      const root = document.getElementById("scheduler-sim");
      if (root) mountSimulator(root, dataUrl, script ? script.src : null);
    };
    if (typeof window.document$ !== "undefined") {
      window.document$.subscribe(start); // Material's instant navigation
    } else if (document.readyState === "loading") {
      document.addEventListener("DOMContentLoaded", start);
    } else {
      start();
    }
  }
})();
