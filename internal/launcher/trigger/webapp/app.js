// The chat page: each message triggers the agent and streams its output
// into the page. Nothing is stored; a token asked for on 401 stays in this
// page's memory only.
(function () {
  "use strict";
  const chat = document.getElementById("chat");
  if (!chat) return;
  const agent = chat.dataset.agent, field = chat.dataset.field;
  const log = document.getElementById("log");
  const input = document.getElementById("input");
  const tokenForm = document.getElementById("token");
  let token = "";
  let pending = null;

  function bubble(cls, text) {
    const d = document.createElement("div");
    d.className = "msg " + cls;
    d.textContent = text;
    log.appendChild(d);
    return d;
  }

  async function run(text) {
    bubble("user", text);
    const out = bubble("run", "");
    const body = {};
    body[field] = text;
    const headers = { "Content-Type": "application/json" };
    if (token) headers["Authorization"] = "Bearer " + token;
    let resp;
    try {
      resp = await fetch("/agents/" + encodeURIComponent(agent) + "/trigger", { method: "POST", headers, body: JSON.stringify(body) });
    } catch (e) {
      out.classList.add("error"); out.textContent = "request failed: " + e; return;
    }
    if (resp.status === 401) {
      out.remove(); log.lastChild.remove();
      pending = text; tokenForm.hidden = false; document.getElementById("token-input").focus();
      return;
    }
    if (!resp.ok) {
      let detail = resp.statusText;
      try { detail = (await resp.json()).detail || detail; } catch (e) { /* not a problem body */ }
      out.classList.add("error"); out.textContent = detail; return;
    }
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    const prefix = "[" + agent + "] ";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i); buf = buf.slice(i + 1);
        if (line.startsWith(prefix)) {
          out.textContent += (out.textContent ? "\n" : "") + line.slice(prefix.length);
        } else if (line.startsWith("{")) {
          const end = JSON.parse(line);
          const s = document.createElement("div");
          s.className = "status";
          s.textContent = end.exit_code === null ? "stopped by a signal" : "exit code " + end.exit_code;
          if (end.exit_code !== 0) out.classList.add("error");
          out.appendChild(s);
        }
      }
    }
  }

  document.getElementById("send").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    input.value = "";
    run(text);
  });
  for (const b of document.querySelectorAll("button.prompt")) {
    b.addEventListener("click", () => run(b.dataset.prompt));
  }
  tokenForm.addEventListener("submit", (e) => {
    e.preventDefault();
    token = document.getElementById("token-input").value;
    tokenForm.hidden = true;
    if (pending !== null) { const t = pending; pending = null; run(t); }
  });
})();
