"""The page for people at ``GET /``: one self-contained HTML file (inline CSS and JS, no
network beyond this server), kept in a Python module so it ships with the package without
package-data configuration.

It asks ``POST /v1/answer/stream`` and shows the interpretations with their cited passages
(title, the supporting sentence marked inside the passage text) as soon as the program knows
them, the answer as the LM writes it, then the whole answer and the cost (LM calls, seconds,
seconds to the first words) from the stream's ``done`` event; ``body[data-state]`` says when
it is over (``answered``, ``failed``, ``token``). Model output and passages are
inserted as text nodes, never as HTML. ``#answer``'s ``data-chunks`` counts the answer
chunks shown and ``data-first-text`` keeps the text after the first one (the browser test
reads both). ``/?q=...``
fills in the question and asks it at once (a shareable link; the headless-browser test uses
it). A token field appears when the server answers 401.
"""

PAGE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ambiqa</title>
<style>
  :root { color-scheme: light dark; --muted: #6b7280; --line: #d1d5db; --mark: #fde68a; }
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 52rem; margin: 2rem auto;
         padding: 0 1rem; }
  h1 { font-size: 1.4rem; margin-bottom: .2rem; }
  #program { color: var(--muted); font-size: .9rem; margin-top: 0; }
  form { display: flex; gap: .5rem; flex-wrap: wrap; }
  #question { flex: 1 1 30rem; font: inherit; padding: .5rem; }
  button { font: inherit; padding: .5rem 1rem; cursor: pointer; }
  #token-row { display: none; width: 100%; }
  #token-row.shown { display: block; }
  #status { min-height: 1.5rem; color: var(--muted); }
  #status.error { color: #b91c1c; }
  #result[hidden] { display: none; }
  #answer { white-space: pre-wrap; border-left: 4px solid var(--line); padding-left: 1rem; }
  .interp { margin-bottom: 1rem; }
  .interp-q { font-weight: 600; }
  .citation { margin: .3rem 0 .3rem 1rem; font-size: .95rem; }
  .cite-title { font-weight: 600; }
  .cite-sentence { background: var(--mark); color: #111; }
  .cite-how, .unknown { color: var(--muted); font-size: .85rem; }
  #cost { color: var(--muted); font-size: .9rem; }
  #answer.writing::after { content: "\\258D"; color: var(--muted); }
</style>
</head>
<body>
<h1>ambiqa</h1>
<p id="program">loading the program description&hellip;</p>
<form id="ask">
  <input id="question" name="question" maxlength="2000" autocomplete="off" required
         placeholder="Ask a question, e.g. Who played the Weasley brothers?">
  <button id="submit" type="submit">Ask</button>
  <label id="token-row">Access token
    <input id="token" type="password" autocomplete="off"></label>
</form>
<p id="status" role="status" aria-live="polite"></p>
<section id="result" hidden>
  <h2>Answer</h2>
  <p id="answer"></p>
  <h2>Interpretations</h2>
  <ol id="interpretations"></ol>
  <p id="cost"><span id="lm-calls"></span> LM calls, <span id="seconds"></span> s
     (<span id="tokens"></span> tokens, <span id="retrievals"></span> retriever calls;
     first words after <span id="first-chunk"></span> s)</p>
</section>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};
function headers() {
  const h = {"Content-Type": "application/json"};
  const t = $("token").value || sessionStorage.getItem("ambiqa-token") || "";
  if (t) h["Authorization"] = "Bearer " + t;
  return h;
}
function status(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}
function askForToken() {
  $("token-row").className = "shown";
  status("This server needs an access token: enter it and ask again.", true);
}
// The passage text with the supporting sentence marked (text nodes only).
function passageWithMark(text, sentence) {
  const p = el("div", "cite-text");
  const at = sentence ? text.indexOf(sentence) : -1;
  if (at < 0) { p.textContent = text; return p; }
  p.append(document.createTextNode(text.slice(0, at)));
  p.append(el("mark", "cite-sentence", sentence));
  p.append(document.createTextNode(text.slice(at + sentence.length)));
  return p;
}
function showInterpretations(data) {
  const list = $("interpretations");
  list.replaceChildren();
  for (const it of data.interpretations) {
    const li = el("li", "interp");
    li.append(el("div", "interp-q", it.question));
    li.append(el("div", "interp-a", "\\u2192 " + it.answer));
    if (!it.citations.length && !it.unknown_ids.length)
      li.append(el("div", "unknown", "no passage cited"));
    for (const c of it.citations) {
      const d = el("div", "citation");
      d.dataset.passageId = c.id;
      d.append(el("div", "cite-title", c.title + " [" + c.id + "]"));
      d.append(passageWithMark(c.text, c.supporting_sentence));
      d.append(el("div", "cite-how", "marked sentence: " + c.support));
      li.append(d);
    }
    if (it.unknown_ids.length)
      li.append(el("div", "unknown", "cites passages it did not read: " +
                                     it.unknown_ids.join(", ")));
    list.append(li);
  }
  if (!data.interpretations.length)
    list.append(el("li", "unknown", "the program gave no separate interpretations"));
}
function show(data) {
  $("answer").textContent = data.answer;
  $("answer").className = "";
  showInterpretations(data);
  const t = data.trace || {};
  const s = data.stream || {};
  $("first-chunk").textContent = s.first_chunk_s == null ? "\\u2013"
                                                         : Number(s.first_chunk_s).toFixed(2);
  // calls answered by the response cache asked no LM: say so (issue 42)
  $("lm-calls").textContent = t.lm_calls +
    (t.cached_calls ? " (" + t.cached_calls + " from the response cache)" : "");
  $("seconds").textContent = Number(t.wall_s).toFixed(2);
  $("tokens").textContent = (t.input_tokens || 0) + "+" + (t.output_tokens || 0);
  $("retrievals").textContent = t.retriever_calls;
  $("result").hidden = false;
}
// One server-sent event ("event: NAME" and "data: JSON" lines) -> [name, data].
function parseEvent(block) {
  let name = "message", data = "";
  for (const line of block.split("\\n")) {
    if (line.startsWith("event: ")) name = line.slice(7);
    else if (line.startsWith("data: ")) data += line.slice(6);
  }
  return [name, data ? JSON.parse(data) : {}];
}
function onEvent(name, data, started) {
  const answer = $("answer");
  if (name === "evidence") {
    showInterpretations(data);
    $("result").hidden = false;
  } else if (name === "answer") {
    const n = Number(answer.dataset.chunks || 0) + 1;
    if (n === 1) status("Writing the answer\\u2026");
    answer.dataset.chunks = n;
    answer.className = "writing";
    answer.textContent += data.text;
    if (n === 1) answer.dataset.firstText = answer.textContent;
    $("result").hidden = false;
  } else if (name === "restart") {
    answer.textContent = "";
  } else if (name === "done") {
    show(data);
    status("Answered in " + ((performance.now() - started) / 1000).toFixed(2) + " s.");
    document.body.dataset.state = "answered";
  } else if (name === "error") {
    answer.className = "";
    status("Error " + data.status + ": " + data.detail, true);
    document.body.dataset.state = "failed";
  }
}
async function ask(question) {
  status("Asking\\u2026");
  $("submit").disabled = true;
  $("result").hidden = true;
  $("answer").textContent = "";
  $("answer").dataset.chunks = 0;
  $("interpretations").replaceChildren();
  delete document.body.dataset.state;
  const started = performance.now();
  try {
    const r = await fetch("v1/answer/stream", {method: "POST", headers: headers(),
                                                body: JSON.stringify({question})});
    if (r.status === 401) { askForToken(); document.body.dataset.state = "token"; return; }
    if (!r.ok) {
      let body = {};
      try { body = await r.json(); } catch (e) { body = {detail: r.statusText}; }
      const wait = r.headers.get("Retry-After");
      status("Error " + r.status + ": " + body.detail +
             (wait ? " (try again in " + wait + " s)" : ""), true);
      // the state last: whatever watches it (a test, a script) sees the message with it
      document.body.dataset.state = "failed";
      return;
    }
    if ($("token").value) sessionStorage.setItem("ambiqa-token", $("token").value);
    status("Finding the passages and readings\\u2026");
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let at;
      while ((at = buffer.indexOf("\\n\\n")) >= 0) {
        const block = buffer.slice(0, at);
        buffer = buffer.slice(at + 2);
        if (block.trim()) onEvent(...parseEvent(block), started);
      }
    }
    if (!document.body.dataset.state) {
      status("The answer stopped before it was complete.", true);
      document.body.dataset.state = "failed";
    }
  } catch (e) {
    status("Could not reach the server: " + e, true);
    document.body.dataset.state = "failed";
  } finally {
    $("submit").disabled = false;
  }
}
async function describe() {
  try {
    const r = await fetch("v1/program", {headers: headers()});
    if (r.status === 401) { $("token-row").className = "shown";
                            $("program").textContent = "access token required"; return; }
    if (!r.ok) { $("program").textContent = "program not ready yet"; return; }
    const d = await r.json();
    const opt = d.optimizer && d.optimizer.name ? d.optimizer.name : "none";
    const idx = d.index && d.index.index ? d.index.index : "no index";
    $("program").textContent = d.program + " (optimizer " + opt + ", " + idx + ", LM " +
                               d.lm + ")";
  } catch (e) { $("program").textContent = "program description unavailable"; }
  finally { document.body.dataset.described = "yes"; }  // tests wait on it, as on state
}
$("ask").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const q = $("question").value.trim();
  if (q) ask(q);
});
describe();
const q = new URLSearchParams(location.search).get("q");
if (q) { $("question").value = q; ask(q); }
</script>
</body>
</html>
"""
