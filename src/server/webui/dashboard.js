// The dashboard: /metrics polled every second while the view is open, drawn as cards and
// canvas line charts (no charting library), with the served model's facts.
const pollMs = 1000;
const historyLength = 120;  // samples kept for the charts (2 minutes)
const latencyWindow = 30;   // seconds of observations the latency percentiles cover

// The Prometheus text format's samples: name -> [{labels, value}].
export function parsePrometheus(text) {
  const out = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = line.match(/^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$/);
    if (!match) continue;
    const labels = {};
    for (const label of (match[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g))
      labels[label[1]] = label[2].replace(/\\n/g, "\n").replace(/\\(.)/g, "$1");
    if (!out.has(match[1])) out.set(match[1], []);
    out.get(match[1]).push({ labels, value: Number(match[3]) });
  }
  return out;
}

function value(samples, name, labels = {}) {
  const found = (samples.get(name) ?? []).find((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return found ? found.value : 0;
}

// A histogram's cumulative buckets: [[upper bound, count], ...] ending with +Inf.
function buckets(samples, name) {
  return (samples.get(`${name}_bucket`) ?? []).map((s) => [Number(s.labels.le === "+Inf" ? Infinity : s.labels.le), s.value]);
}

// The q-quantile of the observations between two bucket snapshots, interpolated within its
// bucket as Prometheus's histogram_quantile does; undefined without observations.
export function quantile(q, now, before) {
  const counts = now.map(([bound, count], i) => [bound, count - (before?.[i]?.[1] ?? 0)]);
  const total = counts.at(-1)?.[1] ?? 0;
  if (total <= 0) return undefined;
  const rank = q * total;
  let lower = 0, below = 0;
  for (const [bound, count] of counts) {
    if (count >= rank) {
      if (bound === Infinity) return lower;
      return lower + (bound - lower) * (count > below ? (rank - below) / (count - below) : 0);
    }
    lower = bound;
    below = count;
  }
  return lower;
}

function formatCount(n) {
  if (n >= 1e12) return `${(n / 1e12).toFixed(2)} T`;
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(1)} k`;
  return `${Math.round(n)}`;
}

function formatMs(seconds) {
  return seconds === undefined ? "–" : `${(seconds * 1000).toFixed(seconds < 0.1 ? 1 : 0)} ms`;
}

// A line chart on a canvas: the last historyLength samples of each series, y from 0.
class LineChart {
  constructor(canvas, series, smallestTop) {
    this.canvas = canvas;
    this.series = series;  // [{label, color: CSS variable}]
    this.smallestTop = smallestTop;  // the y axis's top while every value is below it
  }

  draw(rows) {
    const canvas = this.canvas, ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth, height = canvas.clientHeight;
    if (width === 0) return;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    const g = canvas.getContext("2d");
    g.scale(ratio, ratio);
    const style = getComputedStyle(document.documentElement);
    const color = (name) => style.getPropertyValue(name).trim();
    const values = rows.flatMap((row) => row.filter((v) => v !== undefined));
    const top = niceCeiling(Math.max(this.smallestTop, ...values));
    const left = 46, right = 8, above = 20, below = 6;
    const plotWidth = width - left - right, plotHeight = height - above - below;
    g.font = "11px system-ui, sans-serif";
    g.strokeStyle = color("--border");
    g.fillStyle = color("--muted");
    g.lineWidth = 1;
    for (let i = 0; i <= 4; ++i) {
      const y = above + plotHeight * (1 - i / 4);
      g.beginPath();
      g.moveTo(left, y);
      g.lineTo(width - right, y);
      g.stroke();
      g.fillText(formatTick(top * i / 4), 2, y + 4);
    }
    let legendX = left;
    this.series.forEach((series, s) => {
      g.strokeStyle = g.fillStyle = color(series.color);
      g.lineWidth = 1.8;
      g.beginPath();
      let drawing = false;
      rows.forEach((row, i) => {
        const v = row[s];
        if (v === undefined) return (drawing = false);
        const x = left + plotWidth * (i + historyLength - rows.length) / (historyLength - 1);
        const y = above + plotHeight * (1 - v / top);
        drawing ? g.lineTo(x, y) : g.moveTo(x, y);
        drawing = true;
      });
      g.stroke();
      const last = rows.at(-1)?.[s];
      const text = `${series.label} ${last === undefined ? "–" : formatTick(last)}`;
      g.fillText(text, legendX, 13);
      legendX += g.measureText(text).width + 14;
    });
  }
}

function niceCeiling(v) {
  const power = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 4, 6, 8, 10].map((m) => m * power).find((c) => c >= v);
}

function formatTick(v) {
  return v >= 1000 ? formatCount(v) : v >= 10 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toPrecision(2);
}

const factRows = [["Model", "model_name"], ["Architecture", "model_type"], ["Parameters", "parameters"],
                  ["Weights", "weight_format"], ["Weight bytes", "weight_bytes"], ["Context", "max_model_len"],
                  ["Ranks", "ranks"], ["Kernels", "kernels"], ["Speculative decoding", "speculative"]];

export class Dashboard {
  constructor(api) {
    this.api = api;
    this.timer = null;
    this.snapshots = [];  // {time, samples}
    this.rows = { tokens: [], requests: [], cache: [], latency: [] };
    this.charts = {
      tokens: new LineChart(document.getElementById("chart-tokens"),
                            [{ label: "prompt", color: "--series-1" }, { label: "generated", color: "--series-2" }], 10),
      requests: new LineChart(document.getElementById("chart-requests"),
                              [{ label: "running", color: "--series-1" }, { label: "waiting", color: "--series-2" }], 4),
      cache: new LineChart(document.getElementById("chart-cache"),
                           [{ label: "KV cache used", color: "--series-1" }, { label: "prefix hits", color: "--series-3" }], 100),
      latency: new LineChart(document.getElementById("chart-latency"),
                             [{ label: "TTFT p50", color: "--series-1" }, { label: "TTFT p99", color: "--series-4" },
                              { label: "ITL p50", color: "--series-3" }, { label: "ITL p99", color: "--series-2" }], 10),
    };
  }

  start() {
    if (this.timer) return;
    this.poll();
    this.timer = setInterval(() => this.poll(), pollMs);
  }

  stop() {
    clearInterval(this.timer);
    this.timer = null;
  }

  async poll() {
    const status = document.getElementById("dashboard-status");
    try {
      const response = await this.api.fetch("/metrics");
      const samples = parsePrometheus(await response.text());
      this.record({ time: performance.now() / 1000, samples });
      status.textContent = `Updated ${new Date().toLocaleTimeString()} from /metrics.`;
    } catch (error) {
      status.textContent = `Cannot read /metrics: ${error.message}`;
    }
  }

  record(snapshot) {
    const previous = this.snapshots.at(-1);
    this.snapshots.push(snapshot);
    while (this.snapshots.length > 1 && snapshot.time - this.snapshots[0].time > latencyWindow) this.snapshots.shift();
    const s = snapshot.samples;
    const rate = (name) => previous ? Math.max(0, value(s, name) - value(previous.samples, name)) / (snapshot.time - previous.time) : undefined;
    const windowStart = this.snapshots[0].samples;
    const latency = (name, q) => quantile(q, buckets(s, name), buckets(windowStart, name));
    const push = (key, row) => {
      this.rows[key].push(row);
      if (this.rows[key].length > historyLength) this.rows[key].shift();
    };
    const ms = (seconds) => (seconds === undefined ? undefined : seconds * 1000);
    push("tokens", [rate("mlaserve_prompt_tokens_total"), rate("mlaserve_generation_tokens_total")]);
    push("requests", [value(s, "mlaserve_num_requests_running"), value(s, "mlaserve_num_requests_waiting")]);
    push("cache", [100 * value(s, "mlaserve_kv_cache_usage_perc"), 100 * value(s, "mlaserve_prefix_cache_hit_rate")]);
    push("latency", [ms(latency("mlaserve_time_to_first_token_seconds", 0.5)), ms(latency("mlaserve_time_to_first_token_seconds", 0.99)),
                     ms(latency("mlaserve_inter_token_latency_seconds", 0.5)), ms(latency("mlaserve_inter_token_latency_seconds", 0.99))]);
    this.renderCards(s);
    this.renderFacts(s);
    for (const [key, chart] of Object.entries(this.charts)) chart.draw(this.rows[key]);
  }

  renderCards(s) {
    const all = (name) => quantile(0.5, buckets(s, name));
    const allP99 = (name) => quantile(0.99, buckets(s, name));
    const drafts = value(s, "mlaserve_spec_decode_num_drafts_total");
    const accepted = value(s, "mlaserve_spec_decode_num_accepted_tokens_total");
    const drafted = value(s, "mlaserve_spec_decode_num_draft_tokens_total");
    const cards = [
      ["generation-tokens", "Generated tokens", formatCount(value(s, "mlaserve_generation_tokens_total"))],
      ["prompt-tokens", "Prompt tokens", formatCount(value(s, "mlaserve_prompt_tokens_total"))],
      ["running", "Running / waiting",
       `${value(s, "mlaserve_num_requests_running")} / ${value(s, "mlaserve_num_requests_waiting")}`],
      ["finished", "Finished / stopped / failed",
       ["finished", "abort", "error"].map((r) => value(s, "mlaserve_request_success_total", { finished_reason: r })).join(" / ")],
      ["kv-cache", "KV cache used", `${(100 * value(s, "mlaserve_kv_cache_usage_perc")).toFixed(1)} %`],
      ["prefix-hits", "Prefix cache hits", `${(100 * value(s, "mlaserve_prefix_cache_hit_rate")).toFixed(1)} %`],
      ["ttft", "TTFT p50 / p99 (all)", `${formatMs(all("mlaserve_time_to_first_token_seconds"))} / ${formatMs(allP99("mlaserve_time_to_first_token_seconds"))}`],
      ["itl", "ITL p50 / p99 (all)", `${formatMs(all("mlaserve_inter_token_latency_seconds"))} / ${formatMs(allP99("mlaserve_inter_token_latency_seconds"))}`],
      ["acceptance", "Draft acceptance", drafts > 0
        ? `${(100 * accepted / drafted).toFixed(0)} %, ${(1 + accepted / drafts).toFixed(2)} tokens/step` : "no drafts"],
    ];
    document.getElementById("cards").replaceChildren(...cards.map(([id, label, text]) => {
      const card = document.createElement("div");
      card.className = "card";
      card.id = `stat-${id}`;
      const labelNode = document.createElement("div");
      labelNode.className = "label";
      labelNode.textContent = label;
      const valueNode = document.createElement("div");
      valueNode.className = "value";
      valueNode.textContent = text;
      card.append(labelNode, valueNode);
      return card;
    }));
  }

  renderFacts(s) {
    const info = (s.get("mlaserve_model_info") ?? [])[0]?.labels ?? {};
    const shown = { ...info, parameters: info.parameters && formatCount(Number(info.parameters)),
                    weight_bytes: info.weight_bytes && `${(Number(info.weight_bytes) / 1e9).toFixed(2)} GB` };
    document.getElementById("facts").replaceChildren(...factRows.filter(([, key]) => shown[key]).map(([label, key]) => {
      const row = document.createElement("tr");
      const head = document.createElement("th");
      head.textContent = label;
      const cell = document.createElement("td");
      cell.textContent = shown[key];
      row.append(head, cell);
      return row;
    }));
  }
}
