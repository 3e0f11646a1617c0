/*
 * Material for MkDocs downloads the search index (search/search_index.json, about 300 kB
 * gzipped) as every page loads, and builds it in a worker: on a phone, a download and seconds
 * of CPU on each page a reader opens, searching or not, and on a slow network the index holds
 * up what the page itself still fetches. This holds that one request back until the reader
 * turns to search: focuses the search field (a click on it, or the / s f keys), opens search,
 * or points at its button; or arrives from a search result (?h=, whose words Material marks
 * with the index). Material then carries on as it would have at load: a query typed
 * meanwhile runs as soon as the index is built.
 *
 * It runs in the page's head (overrides/main.html), before Material's script sends the
 * request. Should Material fetch its index some other way, nothing is held back.
 */
// @ts-check
(() => {
  "use strict";

  const INDEX = "/search/search_index.json";
  /** @type {WeakSet<XMLHttpRequest>} requests for the index */
  const forIndex = new WeakSet();
  /** @type {(() => void)[]} the sends held back */
  const held = [];
  let wanted = new URLSearchParams(window.location.search).has("h");

  function want() {
    if (wanted) return;
    wanted = true;
    held.splice(0).forEach((sendNow) => sendNow());
  }

  const proto = XMLHttpRequest.prototype;
  const open = proto.open;
  const send = proto.send;

  /**
   * XMLHttpRequest.open, noting a request for the index.
   * @this {XMLHttpRequest}
   * @param {string} method
   * @param {string | URL} url
   * @param {...unknown} rest async, user and password, as the caller gave them
   */
  function openNoting(method, url, ...rest) {
    if (new URL(url, document.baseURI).pathname.endsWith(INDEX)) forIndex.add(this);
    return Reflect.apply(open, this, [method, url, ...rest]);
  }

  /**
   * XMLHttpRequest.send, held back for the index until the reader turns to search.
   * @this {XMLHttpRequest}
   * @param {Document | XMLHttpRequestBodyInit | null} [body]
   */
  function sendWhenWanted(body) {
    if (wanted || !forIndex.has(this)) {
      send.call(this, body);
      return;
    }
    held.push(() => send.call(this, body));
  }

  proto.open = openNoting;
  proto.send = sendWhenWanted;

  document.addEventListener("focusin", (event) => {
    if (event.target instanceof Element && event.target.matches(".md-search__input")) want();
  });
  document.addEventListener("change", (event) => {
    if (event.target instanceof HTMLInputElement && event.target.id === "__search") want();
  });
  // A pointer on the search button: the download starts before the click.
  document.addEventListener("pointerover", (event) => {
    if (event.target instanceof Element && event.target.closest('[for="__search"]')) want();
  });
})();
