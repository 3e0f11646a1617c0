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
// @ts-check
"use strict";

/**
 * A topic as curriculum.json lists it (hooks/curriculum.py's curriculum_json).
 * @typedef {{slug: string, title: string, stage: number, summary: string, needs: string[],
 *   url: string}} Topic
 */
/** @typedef {"done" | "ready" | "locked"} State */
/** @typedef {Record<string, State>} States (slug -> state) */

const STORAGE_KEY = "llmserve-progress";
const FORMAT = "llmserve-progress";
const VERSION = 1;
/** @type {Record<State, string>} */
const LABELS = { done: "Done", ready: "Ready", locked: "Locked" };
/** @type {Record<State, string>} */
const ICONS = { done: "✓", ready: "→", locked: "○" };

/**
 * The needs of `topic` that are not done yet, in the curriculum's order.
 * @param {Topic} topic
 * @param {Set<string>} done
 * @returns {string[]}
 */
function missingNeeds(topic, done) {
  return topic.needs.filter((slug) => !done.has(slug));
}

/**
 * slug -> "done" | "ready" | "locked", for every topic.
 * @param {Topic[]} topics
 * @param {Set<string>} done
 * @returns {States}
 */
function topicStates(topics, done) {
  /** @type {States} */
  const states = {};
  for (const topic of topics) {
    if (done.has(topic.slug)) states[topic.slug] = "done";
    else states[topic.slug] = missingNeeds(topic, done).length === 0 ? "ready" : "locked";
  }
  return states;
}

/**
 * The Ready topics, in stage order (the curriculum's order within a stage).
 * @param {Topic[]} topics
 * @param {Set<string>} done
 * @returns {Topic[]}
 */
function nextUp(topics, done) {
  const states = topicStates(topics, done);
  return topics
    .filter((topic) => states[topic.slug] === "ready")
    .sort((a, b) => a.stage - b.stage);
}

/**
 * The file a reader exports: small, versioned, slugs in curriculum order.
 * @param {Topic[]} topics
 * @param {Set<string>} done
 * @returns {string}
 */
function exportProgress(topics, done) {
  const slugs = topics.filter((topic) => done.has(topic.slug)).map((topic) => topic.slug);
  return JSON.stringify({ format: FORMAT, version: VERSION, done: slugs }, null, 2);
}

/**
 * The done set from an exported file's text. Throws an Error that says what is wrong with the
 * file and what to do; nothing is changed until the whole file has been checked.
 * @param {Topic[]} topics
 * @param {string} text
 * @returns {Set<string>}
 */
function importProgress(topics, text) {
  /** @type {any} what the file holds, checked below before it is used */
  let data;
  try {
    data = JSON.parse(text);
  } catch (error) {
    // JSON.parse throws a SyntaxError, an Error with a message.
    const reason = /** @type {SyntaxError} */ (error).message;
    throw new Error(`This is not a progress file: it is not JSON (${reason}).`);
  }
  if (data === null || typeof data !== "object" || data.format !== FORMAT) {
    throw new Error(`This is not a progress file: it has no "format": "${FORMAT}". ` +
      "Export one with the Export button.");
  }
  if (data.version !== VERSION) {
    throw new Error(`This progress file has version ${JSON.stringify(data.version)}; ` +
      `this site reads version ${VERSION}.`);
  }
  if (!Array.isArray(data.done) ||
    !data.done.every((/** @type {unknown} */ slug) => typeof slug === "string")) {
    throw new Error('This progress file\'s "done" must be a list of topic names.');
  }
  /** @type {string[]} */
  const slugs = data.done;
  const known = new Set(topics.map((topic) => topic.slug));
  const unknown = slugs.filter((slug) => !known.has(slug));
  if (unknown.length) {
    throw new Error(`This progress file names topics this site does not have: ${unknown.join(", ")}.`);
  }
  return new Set(slugs);
}

if (typeof module !== "undefined") {
  module.exports = { missingNeeds, topicStates, nextUp, exportProgress, importProgress, LABELS };
}

/* --- In the browser ------------------------------------------------------------------ */

/**
 * @param {Topic[]} topics
 * @returns {Set<string>}
 */
function loadDone(topics) {
  try {
    const text = window.localStorage.getItem(STORAGE_KEY);
    return text === null ? new Set() : importProgress(topics, text);
  } catch (error) {
    return new Set(); // unreadable or from another version of the site: start afresh
  }
}

/**
 * @param {Topic[]} topics
 * @param {Set<string>} done
 */
function saveDone(topics, done) {
  window.localStorage.setItem(STORAGE_KEY, exportProgress(topics, done));
}

/**
 * An HTML element with these attributes and children.
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, string>} [attributes]
 * @param {...(Node | string)} children
 * @returns {HTMLElementTagNameMap[K]}
 */
function element(tag, attributes, ...children) {
  const node = document.createElement(tag);
  Object.entries(attributes || {}).forEach(([name, value]) => node.setAttribute(name, value));
  children.forEach((child) => node.append(child));
  return node;
}

/** @param {State} state */
function badge(state) {
  return element("span", { class: `progress-badge progress-${state}` },
    element("span", { "aria-hidden": "true" }, ICONS[state]), ` ${LABELS[state]}`);
}

/**
 * @param {Topic[]} topics
 * @param {string[]} slugs
 * @returns {string[]}
 */
function titles(topics, slugs) {
  const bySlug = Object.fromEntries(topics.map((topic) => [topic.slug, topic]));
  return slugs.map((slug) => bySlug[slug].title);
}

/**
 * A topic page's control: its state, what it still needs, and Mark as done / Undo.
 * @param {HTMLElement} root
 * @param {Topic[]} topics
 * @param {Set<string>} done
 * @param {() => void} render
 */
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

/**
 * The stage map's topics: a class for the colour and a visible mark and word.
 * @param {SVGSVGElement} map
 * @param {Topic[]} topics
 * @param {States} states
 * @param {Set<string>} done
 */
function showMap(map, topics, states, done) {
  for (const group of map.querySelectorAll("g.stage-map-topic[data-slug]")) {
    const slug = /** @type {string} */ (/** @type {SVGGElement} */ (group).dataset.slug);
    // The build marks only topics the curriculum has (hooks/curriculum.py).
    const topic = /** @type {Topic} */ (topics.find((t) => t.slug === slug));
    const state = states[slug];
    Object.keys(LABELS).forEach((s) => group.classList.toggle(`progress-${s}`, s === state));
    let mark = group.querySelector("text.progress-mark");
    if (!mark) {
      const rect = /** @type {SVGRectElement} */ (group.querySelector("rect"));
      mark = document.createElementNS("http://www.w3.org/2000/svg", "text");
      mark.setAttribute("class", "progress-mark");
      const width = Number(rect.getAttribute("width"));
      mark.setAttribute("x", String(Number(rect.getAttribute("x")) + width / 2));
      mark.setAttribute("y", String(Number(rect.getAttribute("y")) + 13));
      group.append(mark);
    }
    mark.textContent = `${ICONS[state]} ${LABELS[state]}`;
    const needs = missingNeeds(topic, done);
    const why = needs.length ? ` (needs ${titles(topics, needs).join(", ")})` : "";
    const link = group.closest("a");
    if (link) link.setAttribute("aria-label", `${topic.title}: ${LABELS[state]}${why}`);
    /** @type {Element} */ (group.querySelector("title")).textContent =
      `${LABELS[state]}${why}. ${topic.summary}`;
  }
}

/**
 * Each topic in the nav gets its state as a word (and an icon), not only a colour.
 * @param {Topic[]} topics
 * @param {States} states
 * @param {string} base the site's root URL
 */
function showNav(topics, states, base) {
  const urls = new Map(topics.map((t) => [new URL(t.url, base).pathname, t]));
  const links = /** @type {NodeListOf<HTMLAnchorElement>} */ (
    document.querySelectorAll("nav.md-nav a.md-nav__link[href]"));
  for (const link of links) {
    const topic = urls.get(new URL(link.href).pathname);
    if (!topic) continue;
    link.querySelector(".progress-badge")?.remove();
    link.append(badge(states[topic.slug]));
  }
}

/**
 * The home page's panel: Next up, and reset, export, import.
 * @param {HTMLElement} panel
 * @param {Topic[]} topics
 * @param {Set<string>} done
 * @param {() => void} render
 * @param {string} base the site's root URL
 */
function showPanel(panel, topics, done, render, base) {
  const ready = nextUp(topics, done);
  const list = ready.length
    ? element("ul", {}, ...ready.map((topic) => element("li", {},
      element("a", { href: new URL(topic.url, base).href }, topic.title),
      ` (stage ${topic.stage})`)))
    : element("p", {}, "Nothing: every topic is done.");
  /** @type {(label: string, name: string, action: () => void) => HTMLButtonElement} */
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
    const chosen = file.files?.[0];
    if (!chosen) return;
    chosen.text().then((text) => {
      let imported;
      try {
        imported = importProgress(topics, text);
      } catch (error) {
        message.textContent = /** @type {Error} */ (error).message;
        return;
      }
      done.clear();
      imported.forEach((slug) => done.add(slug));
      saveDone(topics, done);
      render();
      progressMessage().textContent =
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
        progressMessage().textContent =
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
 * The panel's message line, as the last render drew it (a render replaces the panel).
 * @returns {HTMLElement}
 */
function progressMessage() {
  return /** @type {HTMLElement} */ (document.querySelector("#progress-panel .progress-message"));
}

/**
 * Under the map, one line says the state of the topic the pointer or the keyboard focus is on,
 * and which needs are not done yet: a tooltip a keyboard can open too.
 * @param {Element} box
 */
function mountHint(box) {
  const hint = element("p", { class: "progress-hint", "aria-hidden": "true" },
    "Point at a topic, or move to it with Tab, to see its state and what it still needs.");
  box.after(hint);
  /** @param {Event} event */
  const show = (event) => {
    const target = /** @type {Partial<Element> | null} */ (event.target);
    const link = target && target.closest && target.closest("a[aria-label]");
    if (link) hint.textContent = link.getAttribute("aria-label");
  };
  box.addEventListener("focusin", show);
  box.addEventListener("mouseover", show);
}

/**
 * @param {Topic[]} topics
 * @param {string} base the site's root URL
 */
function mountProgress(topics, base) {
  const done = loadDone(topics);
  const box = document.querySelector(".stage-map-box");
  if (box) mountHint(box);
  // Re-rendering replaces the controls: keep the keyboard focus on the one that was used.
  const render = () => {
    const active = /** @type {Partial<HTMLElement> | null} */ (document.activeElement);
    const focused = active && active.dataset ? active.dataset.action : undefined;
    const states = topicStates(topics, done);
    const controls = /** @type {NodeListOf<HTMLElement>} */ (
      document.querySelectorAll(".progress-control[data-topic]"));
    controls.forEach((root) => showControl(root, topics, done, render));
    const maps = /** @type {NodeListOf<SVGSVGElement>} */ (
      document.querySelectorAll("svg.stage-map"));
    maps.forEach((map) => showMap(map, topics, states, done));
    const panel = document.getElementById("progress-panel");
    if (panel) showPanel(panel, topics, done, render, base);
    showNav(topics, states, base);
    if (focused) {
      /** @type {HTMLElement | null} */ (document.querySelector(`[data-action="${focused}"]`))
        ?.focus();
    }
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
  const script = /** @type {HTMLScriptElement | null} */ (document.currentScript);
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
