// The page's entry point: the API client (with the key, asked once and kept in sessionStorage),
// the model's name, and the two views, chat at "/" and the dashboard at "/dashboard".
import { Chat } from "/chat.js";
import { Dashboard } from "/dashboard.js";

const keyStorage = "mlaserve.apiKey";

class Api {
  constructor() {
    this.key = sessionStorage.getItem(keyStorage) || "";
    this.keyPrompt = null;
  }

  // fetch() against this server; a 401 asks for the key and tries again.
  async fetch(path, options = {}) {
    for (;;) {
      const headers = { "Content-Type": "application/json", ...(options.headers || {}) };
      if (this.key) headers.Authorization = `Bearer ${this.key}`;
      const response = await fetch(path, { ...options, headers });
      if (response.status !== 401) return response;
      await this.askKey();
    }
  }

  askKey() {
    if (this.keyPrompt) return this.keyPrompt;
    const dialog = document.getElementById("key-dialog");
    const input = document.getElementById("api-key");
    this.keyPrompt = new Promise((resolve) => {
      dialog.addEventListener("close", () => {
        this.key = input.value.trim();
        sessionStorage.setItem(keyStorage, this.key);
        this.keyPrompt = null;
        resolve();
      }, { once: true });
    });
    input.value = "";
    dialog.showModal();
    return this.keyPrompt;
  }
}

async function modelName(api) {
  const response = await api.fetch("/v1/models");
  const body = await response.json();
  return body.data[0].id;
}

function showView(name, chat, dashboard) {
  document.getElementById("chat-view").hidden = name !== "chat";
  document.getElementById("dashboard-view").hidden = name !== "dashboard";
  for (const tab of document.querySelectorAll(".tabs a")) {
    if (tab.dataset.view === name) tab.setAttribute("aria-current", "page");
    else tab.removeAttribute("aria-current");
  }
  if (name === "dashboard") dashboard.start();
  else dashboard.stop();
  chat.focus();
}

async function main() {
  const api = new Api();
  const model = await modelName(api);
  document.getElementById("model-name").textContent = model;
  document.title = `${model} · mlaserve`;
  const chat = new Chat(api, model);
  const dashboard = new Dashboard(api);
  const viewOf = (path) => (path === "/dashboard" ? "dashboard" : "chat");
  for (const tab of document.querySelectorAll(".tabs a")) {
    tab.addEventListener("click", (event) => {
      event.preventDefault();
      history.pushState(null, "", tab.getAttribute("href"));
      showView(tab.dataset.view, chat, dashboard);
    });
  }
  window.addEventListener("popstate", () => showView(viewOf(location.pathname), chat, dashboard));
  document.getElementById("menu-button").addEventListener("click", () => {
    document.getElementById("sidebar").classList.toggle("open");
  });
  showView(viewOf(location.pathname), chat, dashboard);
}

main().catch((error) => {
  document.getElementById("model-name").textContent = `cannot reach the server: ${error.message}`;
});
