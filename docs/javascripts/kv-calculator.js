/*
 * KV cache calculator for the "KV cache size math" page.
 *
 * The core is pure functions that mirror llmserve_ref.planning.kv_math one for one (the
 * test suite runs them under Node against the Python for every catalog model).
 * A model config is an object with the fields of catalog_as_json(): num_layers,
 * num_attention_heads, num_kv_heads, head_dim, kv_lora_rank, qk_rope_head_dim,
 * max_position_embeddings. Precisions are passed as bits per element.
 *
 * In a browser it also wires the form in <div id="kv-calculator">, filling its
 * lists from kv-catalog.json, which the docs build writes next to this script.
 * On pages without that element it does nothing.
 */
// @ts-check
"use strict";

/**
 * A model's attention config, as catalog_as_json() writes it (llmserve_ref.planning.model_catalog).
 * @typedef {{num_layers: number, num_attention_heads: number, num_kv_heads: number,
 *   head_dim: number, kv_lora_rank: number, qk_rope_head_dim: number,
 *   max_position_embeddings: number}} ModelConfig
 */
/**
 * How the cache is split and stored: tensor-parallel GPUs, and for a grouped quantized cache,
 * the elements a scale covers and the bytes of each group's scale.
 * @typedef {{tensorParallel?: number, groupSize?: number | null, scaleBytes?: number}} KvOptions
 */
/**
 * kv-catalog.json: the catalog's models and GPUs, the dtypes' bits, vLLM's default
 * gpu_memory_utilization (hooks/site_data.py).
 * @typedef {{
 *   models: (ModelConfig & {name: string, source: string, num_parameters: number})[],
 *   gpus: {name: string, memory_bytes: number, source: string}[],
 *   dtype_bits: Record<string, number>, gpu_memory_utilization: number}} Catalog
 */

/**
 * @param {boolean} condition
 * @param {string} message
 * @returns {asserts condition}
 */
function check(condition, message) {
  if (!condition) throw new Error(message);
}

/**
 * @param {number} n
 * @returns {number}
 */
function safe(n) {
  check(Number.isSafeInteger(n), `${n} bytes is beyond exact integer arithmetic here`);
  return n;
}

/**
 * @param {number} a
 * @param {number} b
 * @returns {number}
 */
function ceilDiv(a, b) {
  return Math.ceil(a / b);
}

/**
 * @param {ModelConfig} cfg
 * @param {number} tp
 */
function checkTensorParallel(cfg, tp) {
  check(Number.isInteger(tp) && tp >= 1 && cfg.num_attention_heads % tp === 0,
    `tensor_parallel=${tp} must be a positive divisor of its ${cfg.num_attention_heads} attention heads`);
  const kv = cfg.num_kv_heads;
  check(cfg.kv_lora_rank > 0 || kv % tp === 0 || tp % kv === 0,
    `tensor_parallel=${tp} neither divides nor is a multiple of its ${kv} KV heads`);
}

/**
 * @param {ModelConfig} cfg
 * @param {number} contextLen
 */
function checkContext(cfg, contextLen) {
  check(Number.isInteger(contextLen) && contextLen >= 0,
    `context length must be zero or more tokens, got ${contextLen}`);
  check(contextLen <= cfg.max_position_embeddings,
    `the model takes at most ${cfg.max_position_embeddings} tokens (max_position_embeddings)`);
}

/** @param {ModelConfig} cfg */
function checkConfig(cfg) {
  /** @type {(keyof ModelConfig)[]} */
  const positive = ["num_layers", "num_attention_heads", "num_kv_heads", "head_dim"];
  for (const field of positive) {
    check(Number.isInteger(cfg[field]) && cfg[field] > 0, `${field} must be a positive integer`);
  }
  /** @type {(keyof ModelConfig)[]} */
  const nonNegative = ["kv_lora_rank", "qk_rope_head_dim"];
  for (const field of nonNegative) {
    check(Number.isInteger(cfg[field]) && cfg[field] >= 0, `${field} must be 0 or more`);
  }
  check(cfg.num_attention_heads % cfg.num_kv_heads === 0,
    `${cfg.num_kv_heads} KV heads do not divide ${cfg.num_attention_heads} attention heads; ` +
    "every KV head must serve the same number of query heads");
}

/**
 * Elements one layer caches for one token on each GPU: query heads never appear.
 * @param {ModelConfig} cfg
 * @param {number} [tensorParallel]
 * @returns {number}
 */
function kvElementsPerLayer(cfg, tensorParallel = 1) {
  checkConfig(cfg);
  checkTensorParallel(cfg, tensorParallel);
  if (cfg.kv_lora_rank > 0) return cfg.kv_lora_rank + cfg.qk_rope_head_dim;
  const kvHeadsHere = Math.max(1, Math.floor(cfg.num_kv_heads / tensorParallel));
  return 2 * kvHeadsHere * cfg.head_dim;
}

/**
 * Bytes for `elements` elements of `bits` bits, plus scale bytes per group if grouped.
 * @param {number} elements
 * @param {number} bits
 * @param {number | null} [groupSize]
 * @param {number} [scaleBytes]
 * @returns {number}
 */
function bytesFor(elements, bits, groupSize = null, scaleBytes = 4) {
  const totalBits = elements * bits;
  check(totalBits % 8 === 0, `${elements} elements of ${bits} bits do not fill whole bytes`);
  let scales = 0;
  if (groupSize !== null) {
    check(groupSize > 0 && elements % groupSize === 0,
      `group size ${groupSize} does not divide the ${elements} elements a layer caches per token`);
    scales = (elements / groupSize) * scaleBytes;
  }
  return totalBits / 8 + scales;
}

/**
 * @param {ModelConfig} cfg
 * @param {number} bits
 * @param {KvOptions} [options]
 * @returns {number}
 */
function kvBytesPerToken(cfg, bits, { tensorParallel = 1, groupSize = null, scaleBytes = 4 } = {}) {
  const perLayer = bytesFor(kvElementsPerLayer(cfg, tensorParallel), bits, groupSize, scaleBytes);
  return safe(cfg.num_layers * perLayer);
}

/**
 * @param {ModelConfig} cfg
 * @param {number} contextLen
 * @param {number} bits
 * @param {KvOptions} [options]
 * @returns {number}
 */
function kvBytesPerSequence(cfg, contextLen, bits, options = {}) {
  checkContext(cfg, contextLen);
  return safe(contextLen * kvBytesPerToken(cfg, bits, options));
}

/**
 * @param {ModelConfig} cfg
 * @param {number} contextLen
 * @param {number} batchSize
 * @param {number} bits
 * @param {KvOptions} [options]
 * @returns {number}
 */
function kvBytesPerBatch(cfg, contextLen, batchSize, bits, options = {}) {
  check(Number.isInteger(batchSize) && batchSize >= 0,
    `batch size must be zero or more sequences, got ${batchSize}`);
  return safe(batchSize * kvBytesPerSequence(cfg, contextLen, bits, options));
}

/**
 * @param {number} numParameters
 * @param {number} bits
 * @returns {number}
 */
function weightBytes(numParameters, bits) {
  check(Number.isInteger(numParameters) && numParameters >= 0,
    `parameter count must be zero or more, got ${numParameters}`);
  return safe(ceilDiv(numParameters * bits, 8));
}

/**
 * Bytes each GPU has left for the KV cache, as vLLM sizes it (activations not counted).
 * @param {number} gpuMemoryBytes
 * @param {number} weightsBytes
 * @param {{tensorParallel?: number, gpuMemoryUtilization: number}} options
 * @returns {number}
 */
function kvCacheBudget(gpuMemoryBytes, weightsBytes, { tensorParallel = 1, gpuMemoryUtilization }) {
  check(gpuMemoryUtilization > 0 && gpuMemoryUtilization <= 1,
    `gpu_memory_utilization is a fraction in (0, 1], got ${gpuMemoryUtilization}`);
  check(Number.isInteger(tensorParallel) && tensorParallel >= 1,
    `tensor_parallel must be 1 or more GPUs, got ${tensorParallel}`);
  const usable = Math.floor(gpuMemoryBytes * gpuMemoryUtilization);
  return safe(usable - ceilDiv(weightsBytes, tensorParallel));
}

/**
 * @param {ModelConfig} cfg
 * @param {number} budgetBytes
 * @param {number} bits
 * @param {KvOptions} [options]
 * @returns {number}
 */
function maxKvTokens(cfg, budgetBytes, bits, options = {}) {
  return Math.floor(Math.max(0, budgetBytes) / kvBytesPerToken(cfg, bits, options));
}

/**
 * @param {ModelConfig} cfg
 * @param {number} contextLen
 * @param {number} budgetBytes
 * @param {number} bits
 * @param {KvOptions} [options]
 * @returns {number}
 */
function sequencesThatFit(cfg, contextLen, budgetBytes, bits, options = {}) {
  checkContext(cfg, contextLen);
  check(contextLen > 0, "context length must be at least one token to count sequences");
  return Math.floor(maxKvTokens(cfg, budgetBytes, bits, options) / contextLen);
}

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

/**
 * Same text as kv_math.format_bytes: integer arithmetic, rounding half up.
 * @param {number | bigint} n
 * @returns {string}
 */
function formatBytes(n) {
  const b = BigInt(n);
  check(b >= 0n, `a byte count is zero or more, got ${n}`);
  let k = 0;
  while (k + 1 < UNITS.length && b >= 1024n ** BigInt(k + 1)) k += 1;
  const unit = 1024n ** BigInt(k);
  if (b % unit === 0n) return `${b / unit} ${UNITS[k]}`;
  const hundredths = (200n * b + unit) / (2n * unit);
  return `${hundredths / 100n}.${String(hundredths % 100n).padStart(2, "0")} ${UNITS[k]}`;
}

const core = {
  kvElementsPerLayer, kvBytesPerToken, kvBytesPerSequence, kvBytesPerBatch, weightBytes,
  kvCacheBudget, maxKvTokens, sequencesThatFit, formatBytes,
};

if (typeof module !== "undefined") module.exports = core;

/* ---- the form: runs only in a browser, only where the page has one ---- */

/**
 * @param {HTMLElement} root
 * @param {string} catalogUrl
 */
function mountCalculator(root, catalogUrl) {
  if (root.dataset.mounted) return;
  root.dataset.mounted = "yes";
  /** @type {(id: string) => HTMLElement} the form's element of id kv-<id> */
  const $ = (id) => /** @type {HTMLElement} */ (root.querySelector(`#kv-${id}`));
  /** @type {(id: string) => HTMLInputElement | HTMLSelectElement} a field: an input or a list */
  const field = (id) => /** @type {HTMLInputElement | HTMLSelectElement} */ ($(id));
  /** @type {(id: string) => number} */
  const int = (id) => Number(field(id).value);
  const source = /** @type {HTMLAnchorElement} */ ($("source"));
  const modelFields = ["layers", "heads", "kv-heads", "head-dim", "lora-rank", "rope-dim", "params"];
  /** @type {Catalog} the model catalog, once loaded (nothing runs before) */
  let catalog;

  /**
   * @param {HTMLElement} select
   * @param {string} value
   * @param {string} text
   */
  function option(select, value, text) {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = text;
    select.append(o);
  }

  function showModel() {
    const m = catalog.models.find((x) => x.name === field("model").value);
    if (!m) return;
    field("layers").value = String(m.num_layers);
    field("heads").value = String(m.num_attention_heads);
    field("kv-heads").value = String(m.num_kv_heads);
    field("head-dim").value = String(m.head_dim);
    field("lora-rank").value = String(m.kv_lora_rank);
    field("rope-dim").value = String(m.qk_rope_head_dim);
    field("params").value = String(m.num_parameters / 1e9);
    source.href = `https://huggingface.co/${m.source}`;
    source.textContent = m.source;
  }

  function showGpu() {
    const g = catalog.gpus.find((x) => x.name === field("gpu").value);
    if (g) field("memory").value = String(g.memory_bytes / 2 ** 30);
  }

  function update() {
    /** @type {(id: string, text: string) => void} */
    const out = (id, text) => { $(`out-${id}`).textContent = text; };
    try {
      const chosen = catalog.models.find((x) => x.name === field("model").value);
      /** @type {ModelConfig} */
      const cfg = {
        num_layers: int("layers"), num_attention_heads: int("heads"),
        num_kv_heads: int("kv-heads"), head_dim: int("head-dim"),
        kv_lora_rank: int("lora-rank"), qk_rope_head_dim: int("rope-dim"),
        max_position_embeddings: chosen ? chosen.max_position_embeddings : Infinity,
      };
      const bits = catalog.dtype_bits[field("kv-dtype").value];
      const context = int("context");
      const batch = int("batch");
      const tp = int("tp");
      /** @type {KvOptions} */
      const options = {
        tensorParallel: tp,
        groupSize: field("group").value === "" ? null : int("group"),
        scaleBytes: int("scale-bytes"),
      };
      const weights = weightBytes(Math.round(Number(field("params").value) * 1e9),
        catalog.dtype_bits[field("weight-dtype").value]);
      const budget = kvCacheBudget(Math.round(Number(field("memory").value) * 2 ** 30), weights,
        { tensorParallel: tp, gpuMemoryUtilization: Number(field("util").value) });
      const perToken = kvBytesPerToken(cfg, bits, options);
      const perBatch = kvBytesPerBatch(cfg, context, batch, bits, options);
      const fit = sequencesThatFit(cfg, context, budget, bits, options);
      out("token", `${perToken.toLocaleString("en")} B = ${formatBytes(perToken)}`);
      out("sequence", formatBytes(kvBytesPerSequence(cfg, context, bits, options)));
      out("batch", formatBytes(perBatch));
      out("weights", formatBytes(ceilDiv(weights, tp)));
      out("budget", budget > 0 ? formatBytes(budget) : "none: the weights do not fit");
      out("tokens", maxKvTokens(cfg, budget, bits, options).toLocaleString("en"));
      out("fit", fit.toLocaleString("en"));
      out("verdict", fit >= batch ? `yes, ${batch} of ${fit}` : `no: only ${fit} fit`);
      $("error").textContent = "";
    } catch (error) {
      root.querySelectorAll("output").forEach((o) => { o.textContent = "-"; });
      $("error").textContent = /** @type {Error} */ (error).message;
    }
  }

  fetch(catalogUrl)
    .then((response) => {
      if (!response.ok) throw new Error(`${catalogUrl}: HTTP ${response.status}`);
      return response.json();
    })
    .then((/** @type {Catalog} */ data) => {
      catalog = data;
      data.models.forEach((m) => option($("model"), m.name, m.name));
      option($("model"), "", "Custom (type the numbers)");
      data.gpus.forEach((g) => option($("gpu"), g.name, g.name));
      option($("gpu"), "", "Custom (type the memory)");
      for (const id of ["kv-dtype", "weight-dtype"]) {
        Object.keys(data.dtype_bits).forEach((d) => option($(id), d, d));
        field(id).value = "bf16";
      }
      field("util").value = String(data.gpu_memory_utilization); // vLLM's default, from the package
      field("model").value = "Llama-3.1-8B";
      field("gpu").value = "H100-SXM";
      showModel();
      showGpu();
      $("model").addEventListener("change", showModel);
      $("gpu").addEventListener("change", showGpu);
      modelFields.forEach((id) => $(id).addEventListener("input", () => {
        field("model").value = "";
        source.removeAttribute("href");
        source.textContent = "your own numbers";
      }));
      $("memory").addEventListener("input", () => { field("gpu").value = ""; });
      root.addEventListener("input", update);
      root.addEventListener("change", update);
      update();
    })
    .catch((error) => {
      $("error").textContent = `The model catalog did not load (${error.message}).`;
    });
}

if (typeof document !== "undefined") {
  const script = /** @type {HTMLScriptElement | null} */ (document.currentScript);
  const catalogUrl = new URL("kv-catalog.json", script ? script.src : document.baseURI).href;
  const start = () => {
    const root = document.getElementById("kv-calculator");
    if (root) mountCalculator(root, catalogUrl);
  };
  if (typeof window.document$ !== "undefined") window.document$.subscribe(start);
  else if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
}
