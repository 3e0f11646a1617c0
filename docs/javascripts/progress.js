/*
 * Progress through the stage graph, kept in this browser (localStorage): no account, no server.
 *
 * A topic is Done when the reader marked it done, Ready when every topic it needs is Done,
 * and Locked otherwise. Locked never blocks reading: a locked page opens as usual and says
 * which of its needs are not done yet.
 *
 * The core is pure functions of the curriculum (the `topics` of curriculum.json, which the
 * docs build writes from curriculum.yml, the file hooks/curriculum.py reads) and of the set of
 * done slugs; the test suite runs them under Node against the curriculum. In a browser it
 * also wires the page: the "Mark as done" control on topic pages (the hook puts an empty
 * <div class="progress-control" data-topic="slug"> under the Needs box), the state of every
 * topic in the nav and on the home page's stage map, and the home page's "Next up" panel
 * (<div id="progress-panel">) with reset, export and import.
 */
"use strict";

const STORAGE_KEY = "llmserve-progress";
const FORMAT = "llmserve-progress";
const VERSION = 1;
const LABELS = { done: "Done", ready: "Ready", locked: "Locked" };
const ICONS = { done: "✓", ready: "→", locked: "○" };

/** The needs of `topic` that are not done yet, in the curriculum's order. */
function missingNeeds(topic, done) {
  return topic.needs.filter((slug) => !done.has(slug));
}

/** slug -> "done" | "ready" | "locked", for every topic. */
function topicStates(topics, done) {
  const states = {};
  for (const topic of topics) {
    if (done.has(topic.slug)) states[topic.slug] = "done";
    else states[topic.slug] = missingNeeds(topic, done).length === 0 ? "ready" : "locked";
  }
  return states;
}

/** The Ready topics, in stage order (the curriculum's order within a stage). */
function nextUp(topics, done) {
  const states = topicStates(topics, done);
  return topics
    .filter((topic) => states[topic.slug] === "ready")
    .sort((a, b) => a.stage - b.stage);
}

/** The file a reader exports: small, versioned, slugs in curriculum order. */
function exportProgress(topics, done) {
  const slugs = topics.filter((topic) => done.has(topic.slug)).map((topic) => topic.slug);
  return JSON.stringify({ format: FORMAT, version: VERSION, done: slugs }, null, 2);
}

/**
 * The done set from an exported file's text. Throws an Error that says what is wrong with the
 * file and what to do; nothing is changed until the whole file has been checked.
 */
function importProgress(topics, text) {
  let data;
  try {
    data = JSON.parse(text);
  } catch (error) {
    throw new Error(`This is not a progress file: it is not JSON (${error.message}).`);
  }
  if (data === null || typeof data !== "object" || data.format !== FORMAT) {
    throw new Error(`This is not a progress file: it has no "format": "${FORMAT}". ` +
      "Export one with the Export button.");
  }
  if (data.version !== VERSION) {
    throw new Error(`This progress file has version ${JSON.stringify(data.version)}; ` +
      `this site reads version ${VERSION}.`);
  }
  if (!Array.isArray(data.done) || !data.done.every((slug) => typeof slug === "string")) {
    throw new Error('This progress file\'s "done" must be a list of topic names.');
  }
  const known = new Set(topics.map((topic) => topic.slug));
  const unknown = data.done.filter((slug) => !known.has(slug));
  if (unknown.length) {
    throw new Error(`This progress file names topics this site does not have: ${unknown.join(", ")}.`);
  }
  return new Set(data.done);
}

if (typeof module !== "undefined") {
  module.exports = { missingNeeds, topicStates, nextUp, exportProgress, importProgress, LABELS };
}

/* --- In the browser ------------------------------------------------------------------ */

function loadDone(topics) {
  try {
    const text = window.localStorage.getItem(STORAGE_KEY);
    return text === null ? new Set() : importProgress(topics, text);
  } catch (error) {
    return new Set(); // unreadable or from another version of the site: start afresh
  }
}

function saveDone(topics, done) {
  window.localStorage.setItem(STORAGE_KEY, exportProgress(topics, done));
}

function element(tag, attributes, ...children) {
  const node = document.createElement(tag);
  Object.entries(attributes || {}).forEach(([name, value]) => node.setAttribute(name, value));
  children.forEach((child) => node.append(child));
  return node;
}

function badge(state) {
  return element("span", { class: `progress-badge progress-${state}` },
    element("span", { "aria-hidden": "true" }, ICONS[state]), ` ${LABELS[state]}`);
}

function titles(topics, slugs) {
  const bySlug = Object.fromEntries(topics.map((topic) => [topic.slug, topic]));
  return slugs.map((slug) => bySlug[slug].title);
}

/** A topic page's control: its state, what it still needs, and Mark as done / Undo. */
function showControl(root, topics, done, render) {
  const topic = topics.find((t) => t.slug === root.dataset.topic);
  if (!topic) return;
  const state = topicStates(topics, done)[topic.slug];
  const missing = titles(topics, missingNeeds(topic, done));
  const button = element("button", { type: "button", class: "md-button", "data-action": "toggle" },
    state === "done" ? "Undo: mark as not done" : "Mark as done");
  button.addEventListener("click", () => {
    if (done.has(topic.slug)) done.delete(topic.slug);
    else done.add(topic.slug);
    saveDone(topics, done);
    render();
  });
  const note = state === "locked"
    ? `Not done yet among its needs: ${missing.join(", ")}. The page is open to read all the same.`
    : state === "done" ? "You marked this topic as done." : "Everything it needs is done.";
  root.replaceChildren(
    element("p", { class: "progress-status" }, "Your progress: ", badge(state), ". ", note),
    button,
  );
  root.hidden = false;
}

/** The stage map's topics: a class for the colour and a visible mark and word. */
function showMap(map, topics, states, done) {
  for (const group of map.querySelectorAll("g.stage-map-topic[data-slug]")) {
    const slug = group.dataset.slug;
    const topic = topics.find((t) => t.slug === slug);
    const state = states[slug];
    Object.keys(LABELS).forEach((s) => group.classList.toggle(`progress-${s}`, s === state));
    let mark = group.querySelector("text.progress-mark");
    if (!mark) {
      const rect = group.querySelector("rect");
      mark = document.createElementNS("http://www.w3.org/2000/svg", "text");
      mark.setAttribute("class", "progress-mark");
      const width = Number(rect.getAttribute("width"));
      mark.setAttribute("x", Number(rect.getAttribute("x")) + width / 2);
      mark.setAttribute("y", Number(rect.getAttribute("y")) + 13);
      group.append(mark);
    }
    mark.textContent = `${ICONS[state]} ${LABELS[state]}`;
    const needs = missingNeeds(topic, done);
    const why = needs.length ? ` (needs ${titles(topics, needs).join(", ")})` : "";
    const link = group.closest("a");
    if (link) link.setAttribute("aria-label", `${topic.title}: ${LABELS[state]}${why}`);
    group.querySelector("title").textContent = `${LABELS[state]}${why}. ${topic.summary}`;
  }
}

/** Each topic in the nav gets its state as a word (and an icon), not only a colour. */
function showNav(topics, states, base) {
  const urls = new Map(topics.map((t) => [new URL(t.url, base).pathname, t]));
  for (const link of document.querySelectorAll("nav.md-nav a.md-nav__link[href]")) {
    const topic = urls.get(new URL(link.href).pathname);
    if (!topic) continue;
    link.querySelector(".progress-badge")?.remove();
    link.append(badge(states[topic.slug]));
  }
}

/** The home page's panel: Next up, and reset, export, import. */
function showPanel(panel, topics, done, render, base) {
  const ready = nextUp(topics, done);
  const list = ready.length
    ? element("ul", {}, ...ready.map((topic) => element("li", {},
      element("a", { href: new URL(topic.url, base).href }, topic.title),
      ` (stage ${topic.stage})`)))
    : element("p", {}, "Nothing: every topic is done.");
  const button = (label, name, action) => {
    const b = element("button", { type: "button", class: "md-button", "data-action": name },
      label);
    b.addEventListener("click", action);
    return b;
  };
  const message = element("p", { class: "progress-message", role: "status" });
  const file = element("input", { type: "file", accept: ".json,application/json",
    id: "progress-import", "data-action": "import" });
  file.addEventListener("change", () => {
    const chosen = file.files[0];
    if (!chosen) return;
    chosen.text().then((text) => {
      let imported;
      try {
        imported = importProgress(topics, text);
      } catch (error) {
        message.textContent = error.message;
        return;
      }
      done.clear();
      imported.forEach((slug) => done.add(slug));
      saveDone(topics, done);
      render();
      document.querySelector("#progress-panel .progress-message").textContent =
        `Imported: ${done.size} ${done.size === 1 ? "topic" : "topics"} done.`;
    });
  });
  panel.replaceChildren(
    element("p", {}, "Your progress, kept in this browser: ", badge("done"), " you marked it, ",
      badge("ready"), " all its needs done, ", badge("locked"), " some need not done yet (the ",
      "page still opens). Mark a topic done at the top of its page."),
    element("h2", { id: "next-up" }, "Next up"),
    element("p", {}, `${done.size} of ${topics.length} topics done. `,
      "Ready, all their needs done, in stage order:"),
    list,
    element("p", { class: "progress-actions" },
      button("Reset progress", "reset", () => {
        done.clear();
        saveDone(topics, done);
        render();
        document.querySelector("#progress-panel .progress-message").textContent =
          "Progress reset: nothing is done.";
      }), " ",
      button("Export progress", "export", () => {
        const blob = new Blob([exportProgress(topics, done)], { type: "application/json" });
        const link = element("a", { href: URL.createObjectURL(blob),
          download: "llmserve-progress.json" });
        document.body.append(link);
        link.click();
        link.remove();
      }), " ",
      element("label", { for: "progress-import" }, "Import progress from a file: "), file),
    message,
  );
  panel.hidden = false;
}

/**
 * Under the map, one line says the state of the topic the pointer or the keyboard focus is on,
 * and which needs are not done yet: a tooltip a keyboard can open too.
 */
function mountHint(box) {
  const hint = element("p", { class: "progress-hint", "aria-hidden": "true" },
    "Point at a topic, or move to it with Tab, to see its state and what it still needs.");
  box.after(hint);
  const show = (event) => {
    const link = event.target.closest && event.target.closest("a[aria-label]");
    if (link) hint.textContent = link.getAttribute("aria-label");
  };
  box.addEventListener("focusin", show);
  box.addEventListener("mouseover", show);
}

function mountProgress(topics, base) {
  const done = loadDone(topics);
  const box = document.querySelector(".stage-map-box");
  if (box) mountHint(box);
  // Re-rendering replaces the controls: keep the keyboard focus on the one that was used.
  const render = () => {
    const focused = document.activeElement && document.activeElement.dataset
      ? document.activeElement.dataset.action : undefined;
    const states = topicStates(topics, done);
    document.querySelectorAll(".progress-control[data-topic]")
      .forEach((root) => showControl(root, topics, done, render));
    document.querySelectorAll("svg.stage-map").forEach((map) => showMap(map, topics, states, done));
    const panel = document.getElementById("progress-panel");
    if (panel) showPanel(panel, topics, done, render, base);
    showNav(topics, states, base);
    if (focused) document.querySelector(`[data-action="${focused}"]`)?.focus();
  };
  render();
  // Another tab marked a topic: show it here too.
  window.addEventListener("storage", (event) => {
    if (event.key !== STORAGE_KEY) return;
    const now = loadDone(topics);
    done.clear();
    now.forEach((slug) => done.add(slug));
    render();
  });
}

if (typeof document !== "undefined") {
  const script = document.currentScript;
  const here = script ? script.src : document.baseURI;
  const base = new URL("..", here).href; // this script sits in <site>/javascripts/
  const dataUrl = new URL("curriculum.json", here).href;
  const start = () => fetch(dataUrl)
    .then((response) => {
      if (!response.ok) throw new Error(`${dataUrl}: HTTP ${response.status}`);
      return response.json();
    })
    .then((data) => mountProgress(data.topics, base))
    .catch((error) => console.error(`progress: the curriculum did not load (${error.message})`));
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
}
