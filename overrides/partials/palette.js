/*
 * The light/dark toggle in the header, inlined right after its markup by
 * overrides/partials/palette.html (Material's own markup, less the data-md-component that
 * mounts Material's palette component once the whole page has loaded). Inlined, not fetched:
 * a script the parser waits for would hold up the page's first paint.
 *
 * Material's component set the scheme the page already showed, and doing it restyled the
 * whole page three times at load (style recalculations of every element on screen: five at
 * load with it, one without; a phone in Lighthouse spent about half its Total Blocking Time
 * there, `nox -s site-audit`). Here the scheme is chosen while the browser is still reading
 * the header, so there is almost nothing to restyle: the one the reader chose last (kept in
 * localStorage under Material's "__palette", which Material's head script also applies),
 * else the first whose media query matches (a reader who prefers dark gets dark on a first
 * visit), else the first. Choosing with the toggle (a click, Enter, or an arrow key on the
 * focused option) switches and remembers, as Material's component did.
 */
// @ts-check
(() => {
  "use strict";

  const KEYS = ["media", "scheme", "primary", "accent"];
  const markup = document.currentScript?.previousElementSibling;
  if (!(markup instanceof HTMLFormElement)) return;
  const form = markup;
  const options = [...form.querySelectorAll("input")];

  /** The <meta name=...> in the head, added if missing. */
  function meta(/** @type {string} */ name) {
    let found = document.head.querySelector(`meta[name="${name}"]`);
    if (!(found instanceof HTMLMetaElement)) {
      found = document.createElement("meta");
      found.setAttribute("name", name);
      document.head.append(found);
    }
    return /** @type {HTMLMetaElement} */ (found);
  }

  /** Show `option`'s scheme: the body's attributes (only those that change: a change
   * restyles the page), the toggle that leads to the next option, and the browser's own
   * colours (scrollbars; the address bar as the header), as Material set them. */
  function apply(/** @type {HTMLInputElement} */ option, /** @type {boolean} */ remember) {
    /** @type {Record<string, string>} */
    const color = {};
    for (const key of KEYS) {
      const value = option.getAttribute(`data-md-color-${key}`) ?? "";
      color[key] = value;
      if (document.body.getAttribute(`data-md-color-${key}`) !== value) {
        document.body.setAttribute(`data-md-color-${key}`, value);
      }
    }
    option.checked = true;
    for (const label of form.querySelectorAll("label")) {
      label.hidden = label.previousElementSibling !== option;
    }
    const header = getComputedStyle(form.closest("header") ?? document.body);
    meta("color-scheme").content = header.colorScheme;
    const rgb = header.backgroundColor.match(/\d+/g) ?? [];
    meta("theme-color").content = `#${rgb.map((c) => (+c).toString(16).padStart(2, "0")).join("")}`;
    if (remember) __md_set("__palette", { index: options.indexOf(option), color });
  }

  const stored = __md_get("__palette");
  const chosen =
    options[stored?.index ?? -1] ??
    options.find((o) => matchMedia(o.getAttribute("data-md-color-media") ?? "").matches) ??
    options[0];
  if (chosen) apply(chosen, false);

  form.addEventListener("change", (event) => {
    if (!(event.target instanceof HTMLInputElement)) return;
    document.body.setAttribute("data-md-color-switching", ""); // Material: no transitions
    apply(event.target, true);
    requestAnimationFrame(() => document.body.removeAttribute("data-md-color-switching"));
  });
  form.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    const next = options[(options.findIndex((o) => o.checked) + 1) % options.length];
    next?.click();
    next?.focus();
  });
})();
