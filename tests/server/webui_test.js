// Drives the built-in web page in a real browser (Debian's Chromium through playwright-core)
// against `mlaserve serve` on a random tiny model: the API key dialog, a streamed reply, stop
// mid-stream (the server frees the sequence), the conversation after a reload, hostile model
// output rendered as text, the dashboard's counters moving, screenshots at desktop and phone
// width in light and dark mode, and when the page is served at all (--webui, --no-webui, host).
// Usage: node webui_test.js WORK_DIR MLASERVE MODEL_DIR CHAT_TEMPLATE CHROMIUM ARTIFACTS_DIR
const { spawn } = require("child_process");
const { check, run } = require("./harness");
const path = require("path");

const [work, binary, modelDir, chatTemplate, chromiumPath, artifacts] = process.argv.slice(2);
const { chromium } = require(require.resolve("playwright-core", { paths: [work] }));
const apiKey = "webui-key-42";
function startServer(extraArgs) {
  return new Promise((resolve, reject) => {
    const proc = spawn(binary, ["serve", "--model", modelDir, "--port", "0", "--served-model-name", "tiny",
      "--kv-cache-gb", "0.25", "--chat-template", chatTemplate, ...extraArgs], { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    proc.stderr.on("data", (chunk) => {
      log += chunk;
      const found = log.match(/ready: serving .* on http:\/\/[^:]+:(\d+)/);
      if (found) resolve({ proc, url: `http://127.0.0.1:${found[1]}`, log: () => log });
    });
    proc.on("exit", (code) => reject(new Error(`server exited ${code}: ${log}`)));
    setTimeout(() => reject(new Error("server did not start: " + log)), 120000);
  });
}

async function stopServer(server) {
  const exited = new Promise((resolve) => server.proc.on("exit", resolve));
  server.proc.kill("SIGTERM");
  return exited;
}

async function metrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const value = (name, labels = "") => {
    const line = text.split("\n").find((l) => l.startsWith(name + "{") && l.includes(labels));
    return line === undefined ? NaN : Number(line.split(" ").at(-1));
  };
  return { text, value };
}

async function waitFor(predicate, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await predicate()) return true;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return false;
}

async function openPage(browser, url, options) {
  const context = await browser.newContext(options);
  const page = await context.newPage();
  page.on("pageerror", (error) => check("no script error on the page", false, error.message));
  page.on("console", (message) => {
    if (message.type() === "error" && !message.text().includes("401")) check("no console error", false, message.text());
  });
  await page.goto(url);
  await page.waitForSelector("#key-dialog[open]");
  await page.fill("#api-key", apiKey);
  await page.press("#api-key", "Enter");
  await page.waitForFunction(() => document.getElementById("model-name").textContent === "tiny");
  return { context, page };
}

async function send(page, text) {
  const replies = await page.locator(".message.assistant").count();
  await page.fill("#prompt", text);
  await page.press("#prompt", "Enter");
  await page.waitForFunction((n) => document.querySelectorAll(".message.assistant").length > n, replies);
}

const lastReply = ".message.assistant >> nth=-1";

async function chat(page, url) {
  await page.click("#settings summary");
  await page.fill("#max-tokens", "24");
  await page.fill("#seed", "5");
  await send(page, "Hello there");
  await page.waitForSelector(`${lastReply} >> .stats`, { timeout: 60000 });
  const stats = await page.textContent(`${lastReply} >> .stats`);
  check("a reply's line gives tokens, TTFT and tok/s", /^24 tokens · TTFT \d+\.\d\d s · \d+\.\d tok\/s$/.test(stats), stats);
  const first = await page.textContent(`${lastReply} >> .content`);
  check("the reply has text", first.trim().length > 0, JSON.stringify(first));

  // A long reply: text appears while Stop is shown (streaming), then Stop ends it.
  await page.fill("#max-tokens", "3000");
  await send(page, "Tell me a very long story");
  const streamed = await waitFor(async () => (await page.textContent(`${lastReply} >> .content`)).length > 40, 30000);
  check("streamed text appears while the reply runs", streamed && await page.isVisible("#stop"));
  check("the request runs on the server", (await metrics(url)).value("mlaserve_num_requests_running") === 1);
  await page.click("#stop");
  await page.waitForSelector(`${lastReply} >> .stats`);
  check("a stopped reply says so", (await page.textContent(`${lastReply} >> .stats`)).endsWith("stopped"));
  check("Send is back after Stop", await page.isVisible("#send") && !(await page.isVisible("#stop")));
  const freed = await waitFor(async () => {
    const m = await metrics(url);
    return m.value("mlaserve_num_requests_running") === 0 && m.value("mlaserve_request_success_total", 'finished_reason="abort"') === 1;
  });
  check("the server freed the stopped request (running 0, one abort)", freed);
  const m = await metrics(url);
  check("no latent cache block is held after the stop", m.value("mlaserve_kv_cache_usage_perc") === 0, m.text);
  return first;
}

async function reload(page, firstReply) {
  await page.reload();
  await page.waitForFunction(() => document.getElementById("model-name").textContent === "tiny");
  const titles = await page.locator("#conversations li span").allTextContents();
  check("the conversation is listed after a reload", titles.length === 1 && titles[0] === "Hello there", JSON.stringify(titles));
  check("its four messages are back", await page.locator(".message").count() === 4);
  check("the first reply is the same text", await page.textContent(".message.assistant >> nth=0 >> .content") === firstReply);
  check("the max tokens setting is kept", await page.inputValue("#max-tokens") === "3000");
  await page.click("#settings summary");
  await page.fill("#max-tokens", "8");
  await page.click(`${lastReply} >> .regenerate`);
  await page.waitForFunction(() => document.querySelector(".message.assistant:last-child .stats")?.textContent.startsWith("8 tokens"));
  check("Regenerate replaces the last reply", await page.locator(".message").count() === 4);
}

// The reply is served by the page's own route, not the model: markup in the answer, the
// reasoning and a tool call must all render as text, and no script may run.
async function hostileOutput(page) {
  const chunk = (delta) => `data: ${JSON.stringify({ choices: [{ index: 0, delta }] })}\n\n`;
  const body = chunk({ reasoning_content: "<img src=y onerror=\"window.__xss=1\">" }) +
    chunk({ content: "<img src=x onerror=\"window.__xss=2\"> <script>window.__xss=3</script> " }) +
    chunk({ content: "[link](javascript:window.__xss=4) **<b>bold</b>**\n```\n<svg onload=window.__xss=5>\n```" }) +
    chunk({ tool_calls: [{ index: 0, id: "call_0", type: "function", function: { name: "<i>f</i>", arguments: "{\"x\": \"<script>window.__xss=6</script>\"}" } }] }) +
    `data: ${JSON.stringify({ choices: [], usage: { completion_tokens: 9,
      completion_tokens_details: { accepted_prediction_tokens: 6, rejected_prediction_tokens: 2 } } })}\n\ndata: [DONE]\n\n`;
  await page.route("**/v1/chat/completions", (route) => route.fulfill({ status: 200, contentType: "text/event-stream", body }));
  await send(page, "<img src=z onerror=\"window.__xss=7\">");
  await page.waitForSelector(`${lastReply} >> .stats`);
  await page.unroute("**/v1/chat/completions");
  const stats = await page.textContent(`${lastReply} >> .stats`);
  check("a speculative reply gives its tokens per step", stats.startsWith("9 tokens") && stats.includes("3.00 tokens/step"), stats);
  const report = await page.evaluate(() => ({
    xss: window.__xss,
    elements: document.querySelectorAll("#messages img, #messages script, #messages svg, #messages b, #messages i").length,
    javascriptLinks: document.querySelectorAll("#messages a[href^='javascript']").length,
    text: document.getElementById("messages").textContent,
  }));
  check("no script from model output ran", report.xss === undefined, String(report.xss));
  check("model markup made no elements", report.elements === 0 && report.javascriptLinks === 0, JSON.stringify(report));
  for (const literal of ["<img src=x onerror=", "<script>window.__xss=3</script>", "<svg onload=", "<i>f</i>", "<img src=z onerror="])
    check(`'${literal}' shows as text`, report.text.includes(literal));
}

async function dashboard(page, url) {
  await page.click("#tab-dashboard");
  check("the dashboard has its own address", new URL(page.url()).pathname === "/dashboard");
  await page.waitForSelector("#stat-generation-tokens");
  const shown = async () => Number((await page.textContent("#stat-generation-tokens .value")).replace(/\D/g, ""));
  const before = await shown();
  check("the generated-token card shows /metrics's counter",
        before === (await metrics(url)).value("mlaserve_generation_tokens_total"), String(before));
  await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "Content-Type": "application/json", Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "count" }], max_tokens: 16, ignore_eos: true }) });
  check("the generated-token card moves", await waitFor(async () => (await shown()) === before + 16), String(await shown()));
  const facts = await page.textContent("#facts");
  for (const fact of ["tiny", "deepseek_v3", "Parameters", "bf16", "1 rank", "Kernels"])
    check(`the dashboard names '${fact}'`, facts.includes(fact), facts);
}

async function screenshots(browser, url, storageState) {
  for (const [name, options] of [["desktop-light", { viewport: { width: 1280, height: 800 }, colorScheme: "light" }],
                                 ["phone-dark", { viewport: { width: 390, height: 844 }, colorScheme: "dark", isMobile: true }]]) {
    const { context, page } = await openPage(browser, url, { ...options, storageState });
    await page.waitForSelector(".message.assistant");
    await page.screenshot({ path: path.join(artifacts, `webui-chat-${name}.png`) });
    const width = options.viewport.width;
    check(`the chat fits ${width} px`, await page.evaluate(() => document.documentElement.scrollWidth) <= width);
    await page.click("#tab-dashboard");
    await page.waitForSelector("#facts tr");
    const traffic = fetch(`${url}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json",
      Authorization: `Bearer ${apiKey}` }, body: JSON.stringify({ model: "tiny", prompt: "Once", max_tokens: 300, ignore_eos: true }) });
    await page.waitForTimeout(3000);  // a few samples in the charts, with tokens flowing
    await traffic;
    await page.screenshot({ path: path.join(artifacts, `webui-dashboard-${name}.png`), fullPage: true });
    check(`the dashboard fits ${width} px`, await page.evaluate(() => document.documentElement.scrollWidth) <= width);
    await context.close();
  }
}

// --no-webui, a non-loopback host (off unless --webui), and the page's own headers.
async function whenServed() {
  for (const [args, served] of [[["--no-webui"], false], [["--host", "0.0.0.0"], false], [["--host", "0.0.0.0", "--webui"], true]]) {
    const server = await startServer(args);
    const response = await fetch(`${server.url}/`);
    check(`GET / with ${args.join(" ")}: ${served ? 200 : 404}`, response.status === (served ? 200 : 404), String(response.status));
    if (args.includes("0.0.0.0") && !served) check("the log says the page is off", server.log().includes("web page: off"));
    check("the server exits 0", (await stopServer(server)) === 0);
  }
}

async function main() {
  const server = await startServer(["--api-key", apiKey]);
  const browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
  try {
    const page = await fetch(`${server.url}/`);
    check("GET / is the page", page.status === 200 && (await page.text()).includes("<title>mlaserve</title>"));
    check("the page forbids scripts not its own", (page.headers.get("content-security-policy") ?? "").includes("script-src 'self'"));
    check("/metrics says what is served", (await metrics(server.url)).text.includes('mlaserve_model_info{model_name="tiny"'));
    const { context, page: tab } = await openPage(browser, server.url, { viewport: { width: 1280, height: 800 } });
    const firstReply = await chat(tab, server.url);
    await reload(tab, firstReply);
    await dashboard(tab, server.url);
    await screenshots(browser, server.url, await context.storageState());
    await tab.click("#tab-chat");
    await hostileOutput(tab);
    await context.close();
  } finally {
    await browser.close();
    check("server exits 0 on SIGTERM", (await stopServer(server)) === 0);
  }
  await whenServed();
}

run(main, `; screenshots in ${artifacts}`);
