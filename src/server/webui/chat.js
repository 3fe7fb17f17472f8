// The chat view: conversations kept in localStorage, replies streamed from
// /v1/chat/completions (reasoning and tool calls apart from the answer), a stop button that
// closes the stream (the server then frees the sequence), copy and regenerate, and a line of
// figures under each reply.
import { renderMarkdown } from "/markdown.js";

const conversationsKey = "mlaserve.conversations";
const currentKey = "mlaserve.current";
const settingsKey = "mlaserve.settings";
const settingFields = { temperature: "temperature", top_p: "top-p", top_k: "top-k", max_tokens: "max-tokens", seed: "seed" };

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function load(key, fallback) {
  try {
    return JSON.parse(localStorage.getItem(key)) ?? fallback;
  } catch {
    return fallback;
  }
}

// The SSE payloads ("data: ...") of a streamed response, as they arrive.
async function* serverEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) if (line.startsWith("data: ")) yield line.slice(6);
    }
  }
}

// "42 tokens · TTFT 0.31 s · 18.2 tok/s · 2.40 tokens/step": decode speed after the first
// token; with speculative decoding, the tokens each forward step emitted (the acceptance length).
// A stopped reply has no usage: its tokens are the chunks streamed (the server sends one a token).
function statsLine(stats) {
  const parts = [`${stats.usage ? "" : "~"}${stats.tokens} tokens`];
  if (stats.ttft !== undefined) parts.push(`TTFT ${stats.ttft.toFixed(2)} s`);
  if (stats.tokens > 1 && stats.decodeSeconds > 0) parts.push(`${((stats.tokens - 1) / stats.decodeSeconds).toFixed(1)} tok/s`);
  if (stats.accepted !== undefined && stats.tokens > stats.accepted)
    parts.push(`${(stats.tokens / (stats.tokens - stats.accepted)).toFixed(2)} tokens/step`);
  if (stats.stopped) parts.push("stopped");
  return parts.join(" · ");
}

export class Chat {
  constructor(api, model) {
    this.api = api;
    this.model = model;
    this.conversations = load(conversationsKey, []);
    this.currentId = localStorage.getItem(currentKey);
    this.controller = null;
    this.messagesNode = document.getElementById("messages");
    this.promptNode = document.getElementById("prompt");
    this.bindSettings();
    this.bindComposer();
    document.getElementById("new-chat").addEventListener("click", () => this.newConversation());
    if (!this.current()) this.newConversation();
    else this.render();
  }

  focus() {
    this.promptNode.focus();
  }

  current() {
    return this.conversations.find((c) => c.id === this.currentId);
  }

  save() {
    localStorage.setItem(conversationsKey, JSON.stringify(this.conversations));
    localStorage.setItem(currentKey, this.currentId);
  }

  newConversation() {
    const empty = this.conversations.find((c) => c.messages.length === 0);
    const conversation = empty ?? { id: `${Date.now()}-${Math.random().toString(16).slice(2)}`, title: "New chat", messages: [] };
    if (!empty) this.conversations.unshift(conversation);
    this.select(conversation.id);
  }

  select(id) {
    if (this.controller) return;
    this.currentId = id;
    this.save();
    this.render();
    document.getElementById("sidebar").classList.remove("open");
  }

  remove(id) {
    if (this.controller && id === this.currentId) return;
    this.conversations = this.conversations.filter((c) => c.id !== id);
    if (id === this.currentId) this.currentId = this.conversations[0]?.id;
    if (!this.current()) this.newConversation();
    this.save();
    this.render();
  }

  bindSettings() {
    const settings = load(settingsKey, {});
    const system = document.getElementById("system-prompt");
    system.value = settings.system ?? "";
    system.addEventListener("change", () => this.saveSettings());
    for (const id of Object.values(settingFields)) {
      const input = document.getElementById(id);
      input.value = settings[id] ?? "";
      input.addEventListener("change", () => this.saveSettings());
    }
  }

  saveSettings() {
    const settings = { system: document.getElementById("system-prompt").value };
    for (const id of Object.values(settingFields)) settings[id] = document.getElementById(id).value;
    localStorage.setItem(settingsKey, JSON.stringify(settings));
  }

  // The request's sampling fields: those set on the page (blank ones are the server's).
  sampling() {
    const out = {};
    for (const [field, id] of Object.entries(settingFields)) {
      const value = document.getElementById(id).value;
      if (value !== "") out[field] = Number(value);
    }
    return out;
  }

  bindComposer() {
    document.getElementById("composer").addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    this.promptNode.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.send();
      }
    });
    document.getElementById("stop").addEventListener("click", () => this.controller?.abort());
  }

  send() {
    const text = this.promptNode.value.trim();
    const conversation = this.current();
    if (!text || this.controller) return;
    this.promptNode.value = "";
    if (conversation.messages.length === 0) conversation.title = text.slice(0, 60);
    conversation.messages.push({ role: "user", content: text });
    this.reply(conversation);
  }

  regenerate() {
    const conversation = this.current();
    if (this.controller || conversation.messages.at(-1)?.role !== "assistant") return;
    conversation.messages.pop();
    this.reply(conversation);
  }

  // What the API is sent: the system prompt, then each turn (a reply's reasoning stays here).
  requestMessages(conversation) {
    const system = document.getElementById("system-prompt").value.trim();
    const messages = system ? [{ role: "system", content: system }] : [];
    for (const message of conversation.messages) {
      const turn = { role: message.role, content: message.content };
      if (message.tool_calls?.length) turn.tool_calls = message.tool_calls;
      messages.push(turn);
    }
    return messages;
  }

  async reply(conversation) {
    const body = { model: this.model, messages: this.requestMessages(conversation), stream: true,
                   stream_options: { include_usage: true }, ...this.sampling() };
    const message = { role: "assistant", content: "", reasoning: "", tool_calls: [], stats: null };
    conversation.messages.push(message);
    this.controller = new AbortController();
    this.setBusy(true);
    this.save();
    this.render();
    const started = performance.now();
    let firstToken;
    const stats = { tokens: 0, usage: false };
    try {
      const response = await this.api.fetch("/v1/chat/completions", { method: "POST", body: JSON.stringify(body),
                                                                       signal: this.controller.signal });
      if (!response.ok) throw new Error((await response.json()).error?.message ?? `HTTP ${response.status}`);
      for await (const data of serverEvents(response)) {
        if (data === "[DONE]") break;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        const delta = chunk.choices?.[0]?.delta;
        if (delta && (delta.content || delta.reasoning_content || delta.tool_calls)) {
          firstToken ??= performance.now();
          stats.tokens += 1;
          this.applyDelta(message, delta);
          this.renderLast();
        }
        if (chunk.usage) {
          stats.usage = true;
          stats.tokens = chunk.usage.completion_tokens;
          stats.accepted = chunk.usage.completion_tokens_details?.accepted_prediction_tokens;
        }
      }
    } catch (error) {
      if (error.name === "AbortError") stats.stopped = true;
      else message.error = error.message;
    }
    const finished = performance.now();
    if (firstToken !== undefined) {
      stats.ttft = (firstToken - started) / 1000;
      stats.decodeSeconds = (finished - firstToken) / 1000;
    }
    message.stats = stats;
    this.controller = null;
    this.setBusy(false);
    this.save();
    this.render();
  }

  applyDelta(message, delta) {
    if (delta.content) message.content += delta.content;
    if (delta.reasoning_content) message.reasoning += delta.reasoning_content;
    for (const call of delta.tool_calls ?? []) {
      const index = call.index ?? message.tool_calls.length;
      message.tool_calls[index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
      const known = message.tool_calls[index];
      if (call.id) known.id = call.id;
      if (call.function?.name) known.function.name += call.function.name;
      if (call.function?.arguments) known.function.arguments += call.function.arguments;
    }
  }

  setBusy(busy) {
    document.getElementById("send").hidden = busy;
    document.getElementById("stop").hidden = !busy;
  }

  render() {
    this.renderList();
    const conversation = this.current();
    this.messagesNode.replaceChildren(
      ...conversation.messages.map((message, i) => this.messageNode(message, i === conversation.messages.length - 1)));
    this.messagesNode.scrollTop = this.messagesNode.scrollHeight;
  }

  // The streaming reply alone, redrawn as it grows.
  renderLast() {
    const messages = this.current().messages;
    this.messagesNode.lastElementChild?.replaceWith(this.messageNode(messages.at(-1), true));
    this.messagesNode.scrollTop = this.messagesNode.scrollHeight;
  }

  renderList() {
    const list = document.getElementById("conversations");
    list.replaceChildren(...this.conversations.map((conversation) => {
      const item = element("li", conversation.id === this.currentId ? "current" : "");
      item.append(element("span", "", conversation.title));
      const remove = element("button", "plain", "×");
      remove.type = "button";
      remove.title = "Delete";
      remove.addEventListener("click", (event) => {
        event.stopPropagation();
        this.remove(conversation.id);
      });
      item.append(remove);
      item.addEventListener("click", () => this.select(conversation.id));
      return item;
    }));
  }

  messageNode(message, last) {
    const node = element("div", `message ${message.role}`);
    node.append(element("div", "role", message.role === "user" ? "You" : this.model));
    if (message.role === "user") {
      node.append(element("div", "body", message.content));
      return node;
    }
    if (message.reasoning) {
      const details = element("details", "reasoning");
      details.append(element("summary", "", "Reasoning"), element("div", "", message.reasoning));
      node.append(details);
    }
    const content = element("div", "content");
    renderMarkdown(content, message.content);
    node.append(content);
    for (const call of message.tool_calls ?? []) {
      const box = element("div", "tool-call");
      box.append(element("div", "name", `Tool call: ${call.function.name}`), element("pre", "", call.function.arguments));
      node.append(box);
    }
    if (message.error) node.append(element("div", "error", message.error));
    if (message.stats) node.append(this.metaNode(message, last));
    return node;
  }

  metaNode(message, last) {
    const meta = element("div", "meta");
    meta.append(element("span", "stats", statsLine(message.stats)));
    const copy = element("button", "plain", "Copy");
    copy.type = "button";
    copy.addEventListener("click", () => navigator.clipboard?.writeText(message.content));
    meta.append(copy);
    if (last) {
      const again = element("button", "plain regenerate", "Regenerate");
      again.type = "button";
      again.addEventListener("click", () => this.regenerate());
      meta.append(again);
    }
    return meta;
  }
}
